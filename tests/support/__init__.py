"""Test fixtures shared between test areas (real servers started on loopback)."""
