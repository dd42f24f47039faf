"""Test bed for end-to-end tests: a real Kubernetes control plane built from Go
modules (see build.sh), KWOK fake GPU nodes, a MIG-manager stand-in and a real
Prometheus with a demand exporter. Test code only; nothing here ships."""
