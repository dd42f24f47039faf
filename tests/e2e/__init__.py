"""End-to-end tests against the real test cluster (tests/cluster); all marked e2e."""
