"""The `tessera` command line: everything the operator decides, reproducible from files."""

import click

from tessera import __version__


@click.group()
@click.version_option(__version__, prog_name="tessera")
def main() -> None:
    """Serve GPU inference at the lowest GPU cost that meets its SLOs."""


from tessera.twin_cli import twin  # noqa: E402

main.add_command(twin)
