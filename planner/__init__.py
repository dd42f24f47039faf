"""Pure planning library: no Kubernetes, no I/O in the hot paths."""
