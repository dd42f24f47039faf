"""`tessera weights`: the digest of a folder of weights, and the server pod's fetcher (docs/weights.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tessera.exit_codes import BAD_INPUT

SOURCES = "/sources"


@click.group("weights")
def weights() -> None:
    """Weights of AdapterPool servers: digests, fetching and checking them."""


@weights.command("digest")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def digest_command(folder: Path) -> None:
    """Print FOLDER's digest, the value of `weights.digest` (sha256 over its files, docs/weights.md)."""
    from tessera.weights.digest import WeightsError, directory_digest

    try:
        click.echo(directory_digest(folder))
    except WeightsError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(BAD_INPUT)


@weights.command("fetch")
@click.argument("uri")
@click.argument("digest")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--sources", default=SOURCES, show_default=True, type=click.Path(path_type=Path),
              help="Where the pod mounts pvc:// sources (<sources>/pvc/<claim>).")
def fetch_command(uri: str, digest: str, dest: Path, sources: Path) -> None:
    """Fetch URI into DEST and check it against DIGEST (a server's init container: the base model's weights)."""
    from tessera.weights.digest import WeightsError
    from tessera.weights.fetch import fetch

    try:
        fetch(uri, digest, dest, sources)
    except WeightsError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(BAD_INPUT)
    click.echo(f"{uri}: {digest} at {dest}")


@weights.command("verify")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.argument("digest")
def verify_command(folder: Path, digest: str) -> None:
    """Check FOLDER against DIGEST without copying it (a base model on a mounted claim)."""
    from tessera.weights.digest import WeightsError
    from tessera.weights.fetch import verify

    try:
        verify(folder, digest, str(folder))
    except WeightsError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(BAD_INPUT)
    click.echo(f"{folder}: {digest}")


@weights.command("serve")
@click.option("--dir", "root", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder shared with vLLM: adapter <name> is fetched into <dir>/<name>.")
@click.option("--sources", default=SOURCES, show_default=True, type=click.Path(path_type=Path),
              help="Where the pod mounts pvc:// sources (<sources>/pvc/<claim>).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
def serve_command(root: Path, sources: Path, host: str, port: int) -> None:
    """Run a server pod's fetcher sidecar: fetch and check an adapter when the operator asks, before its load."""
    from tessera.weights.sidecar import Fetcher, server

    httpd = server(Fetcher(root, sources), host, port)
    click.echo(f"fetching into {root}, listening on {host}:{httpd.server_address[1]}", err=True)
    httpd.serve_forever()
