"""`tessera frontend`: one system's Open Inference Protocol endpoint (see tessera/frontend)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tessera.exit_codes import BAD_INPUT


@click.command("frontend")
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
def frontend(config: Path, host: str, port: int) -> None:
    """Serve one system: carry each request through its task graph, with its deadline, dropping the doomed early.

    CONFIG is the frontend's file (system, task graph, each task's configurations
    with their URLs and planned shares); it is re-read when it changes or on SIGHUP.
    """
    # Imported here: the HTTP stack is only this command's.
    from tessera.frontend.server import serve
    from tessera.planner.input_files import InputError

    try:
        serve(config, host, port)
    except InputError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(BAD_INPUT)
