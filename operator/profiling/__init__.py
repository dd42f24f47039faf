"""Profiler Jobs: what to measure (pure), running them in the cluster, exchanging measured profiles."""
