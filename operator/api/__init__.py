"""The API: the v1alpha1 resources' status models, the CRDs generated from them, systems read from objects, status and Events."""
