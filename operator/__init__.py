"""The kopf operator: handlers, reconcilers, object builders."""
