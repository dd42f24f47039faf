"""The profiler Job: entry point and library."""
