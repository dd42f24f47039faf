"""Files that travel inside the package (examples/ and crds/ of the repository).

They are package data of tessera.examples and tessera.crds (see setup.py), so an
installed wheel finds them from any working folder, and an editable install
finds the repository's own folders.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# The systems `tessera plan` solves together when given no files.
DEFAULT_EXAMPLE_SYSTEMS = ("traffic-analysis.yaml", "social-media.yaml", "ar-assistant.yaml")


def example(name: str) -> Path:
    """A shipped example file by its name under examples/ (for example 'twin/workload.yaml')."""
    return Path(str(resources.files("tessera.examples").joinpath(name)))


def default_example_systems() -> tuple[Path, ...]:
    return tuple(example(name) for name in DEFAULT_EXAMPLE_SYSTEMS)
