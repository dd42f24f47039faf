"""Example systems and twin workloads, shipped in the wheel as package data (tessera.shipped finds them)."""
