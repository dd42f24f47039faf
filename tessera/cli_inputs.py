"""What `tessera plan`, `capacity` and `simulate` share: the pool's options, the system files, the profiles.

Apart from cli.py so that simulate_cli.py uses them without importing the
command group that registers it (no import cycle).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console

from tessera.exit_codes import BAD_INPUT
from tessera.options import BoundedInt
from tessera.planner.catalog import CATALOG
from tessera.planner.input_files import InputError, quote
from tessera.planner.measured import load_measured
from tessera.planner.model import SystemSpec
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.planner_options_cli import MAX_POOL_GPUS, planner_options
from tessera.shipped import default_example_systems

MAX_SPEC_FILES = 64


class BadInput(click.ClickException):
    exit_code = BAD_INPUT


def _pool_options(command):
    options = [
        click.option("--gpu", type=click.Choice(sorted(CATALOG)), default="H100-80GB", show_default=True,
                     help="GPU product of the pool."),
        click.option("--gpus", type=BoundedInt(1, MAX_POOL_GPUS), default=8, show_default=True,
                     help="GPUs in the pool."),
        click.option("--measured", type=click.Path(exists=True, path_type=Path),
                     help="Measured profiles: a `tessera profiles export` CSV, or a folder of ParvaGPU CSVs "
                          "(A100-80GB)."),
        planner_options(),
        click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path)),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _console(to_stderr: bool) -> Console:
    """Wide enough for the plan table when the output is a file or a pipe, not a terminal."""
    console = Console(stderr=to_stderr)
    return console if console.is_terminal else Console(stderr=to_stderr, width=160)


def _load(files: tuple[Path, ...]) -> tuple[list[SystemSpec], dict[str, Path]]:
    """The systems of every file, and the file each came from."""
    paths = files or default_example_systems()
    if len(paths) > MAX_SPEC_FILES:
        raise BadInput(f"FILES: {len(paths)} files, over the limit of {MAX_SPEC_FILES}")
    systems: list[SystemSpec] = []
    origins: dict[str, Path] = {}
    for path in paths:
        loaded = load_systems(path)
        systems += loaded
        origins.update((s.name, path) for s in loaded)
    names = [s.name for s in systems]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BadInput(f"FILES: system names repeat across files: {quote(repeated)}")
    return systems, origins


@contextmanager
def _naming_files(origins: dict[str, Path]):
    """An input error the planner finds names the system; say which file it came from."""
    try:
        yield
    except InputError as error:
        origin = origins.get(error.system) if error.system else None
        raise BadInput(f"{origin}: {error}" if origin else str(error)) from None


def _store(systems, gpu: str, measured: Path | None, options: PlannerOptions):
    try:
        return build_profile_store(systems, gpu, _measured(measured), options.batches, max_mps=options.max_mps)
    except ValueError as error:
        raise BadInput(str(error)) from None


def _measured(measured: Path | None):
    try:
        return load_measured(measured) if measured else None
    except ValueError as error:
        raise BadInput(str(error)) from None

