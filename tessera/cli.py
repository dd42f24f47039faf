"""The `tessera` command line: everything the operator decides, reproducible from files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import yaml
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tessera import __version__
from tessera.planner.capacity import CapacityTable, capacity
from tessera.planner.catalog import CATALOG
from tessera.planner.features import Features, all_feature_sets
from tessera.planner.measured import load_parvagpu_dir
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import NoPlanError, PlannerOptions, plan
from tessera.planner.spec_file import SpecFileError, load_systems
from tessera.render import render_plan
from tessera.operator_cli import operator
from tessera.twin_cli import twin

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_EXAMPLES = ("traffic-analysis.yaml", "social-media.yaml", "ar-assistant.yaml")


@click.group()
@click.version_option(__version__, prog_name="tessera")
def main() -> None:
    """Serve GPU inference at the lowest GPU cost that meets its SLOs."""


main.add_command(twin)
main.add_command(operator)


def _pool_options(command):
    options = [
        click.option("--gpu", type=click.Choice(sorted(CATALOG)), default="H100-80GB", show_default=True,
                     help="GPU product of the pool."),
        click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True, help="GPUs in the pool."),
        click.option("--measured", type=click.Path(exists=True, file_okay=False, path_type=Path),
                     help="Folder of measured profiles in the ParvaGPU CSV format (A100-80GB)."),
        click.option("--levels", type=click.IntRange(min=1), default=PlannerOptions().budget_levels,
                     show_default=True, help="Latency budget levels per task."),
        click.option("--headroom", type=click.FloatRange(min=0), default=PlannerOptions().headroom,
                     show_default=True, help="Capacity kept above demand, as a fraction."),
        click.option("--time-limit", type=click.FloatRange(min=1), default=PlannerOptions().time_limit_s,
                     show_default=True, help="Seconds the solver may spend per plan."),
        click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path)),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _console(to_stderr: bool) -> Console:
    """Wide enough for the plan table when the output is a file or a pipe, not a terminal."""
    console = Console(stderr=to_stderr)
    return console if console.is_terminal else Console(stderr=to_stderr, width=160)


def _load(files: tuple[Path, ...]) -> list[SystemSpec]:
    paths = files or tuple(EXAMPLES / name for name in DEFAULT_EXAMPLES)
    systems: list[SystemSpec] = []
    try:
        for path in paths:
            systems += load_systems(path)
    except (SpecFileError, FileNotFoundError) as error:
        raise click.ClickException(str(error)) from None
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise click.ClickException(f"system names repeat across files: {names}")
    return systems


def _store(systems, gpu: str, measured: Path | None):
    try:
        return build_profile_store(systems, gpu, load_parvagpu_dir(measured) if measured else None)
    except ValueError as error:
        raise click.ClickException(str(error)) from None


@main.command("plan")
@_pool_options
@click.option("--features", default="A+S+T", show_default=True,
              help="Feature switches: A, S, T joined by '+', or 'unopt'.")
@click.option("--output", type=click.Choice(["table", "yaml", "json"]), default="table", show_default=True)
def plan_command(files, gpu, gpus, measured, levels, headroom, time_limit, features, output) -> None:
    """Plan compound systems (YAML FILES; the built-in examples when none) on a GPU pool."""
    systems = _load(files)
    try:
        chosen = Features.parse(features)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    store = _store(systems, gpu, measured)
    options = PlannerOptions(budget_levels=levels, headroom=headroom, time_limit_s=time_limit)
    console = _console(output != "table")
    try:
        with console.status(f"Solving the MILP for {len(systems)} system(s) on {gpus} x {gpu}..."):
            result = plan(systems, Pool(gpu=gpu, gpus=gpus), store, chosen, options)
    except NoPlanError as error:
        raise click.ClickException(str(error)) from None
    if output == "table":
        render_plan(result, console)
    elif output == "json":
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(yaml.safe_dump(json.loads(result.model_dump_json()), sort_keys=False))
    if not result.fully_served:
        sys.exit(3)


@main.command("capacity")
@_pool_options
@click.option("--features", "feature_list", default="all", show_default=True,
              help="Comma-separated feature subsets (e.g. 'unopt,A+T,A+S+T'), or 'all'.")
@click.option("--output", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
def capacity_command(files, gpu, gpus, measured, levels, headroom, time_limit, feature_list, output) -> None:
    """The most demand the pool serves with each feature subset, and ratios to Unopt and A+T."""
    systems = _load(files)
    try:
        feature_sets = (all_feature_sets() if feature_list == "all"
                        else [Features.parse(f) for f in feature_list.split(",")])
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    store = _store(systems, gpu, measured)
    options = PlannerOptions(budget_levels=levels, headroom=headroom, time_limit_s=time_limit)
    console = _console(output != "table")
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("Solving feature subsets", total=len(feature_sets))
        table = capacity(systems, Pool(gpu=gpu, gpus=gpus), store, feature_sets, options,
                         progress=lambda _: progress.advance(bar))
    if output == "json":
        click.echo(table.model_dump_json(indent=2))
    elif output == "markdown":
        click.echo(capacity_markdown(table))
    else:
        console.print(capacity_rich(table))


def _capacity_rows(table: CapacityTable) -> list[list[str]]:
    systems = list(table.rows[0].max_demand_rps) if table.rows else []
    rows = [["features", *[f"{s} max req/s" for s in systems], "total req/s", "x Unopt", "x A+T", "gap",
             "solve s"]]
    for row in table.rows:
        ratios = [table.ratio(row.features, base) for base in ("Unopt", "A+T")]
        rows.append([
            row.features,
            *[f"{row.max_demand_rps[s]:.1f}" if s not in row.unservable else "SLO unreachable" for s in systems],
            f"{row.total_rps:.1f}",
            *[f"{r:.2f}" if r is not None else "-" for r in ratios],
            f"{100 * row.solver.mip_gap:.2f}%" if row.solver else "-",
            f"{row.solver.solve_s:.1f}" if row.solver else (row.error or "-"),
        ])
    return rows


def capacity_rich(table: CapacityTable) -> Table:
    header, *rows = _capacity_rows(table)
    rich_table = Table(title=f"Maximum demand served on {table.gpus} x {table.gpu}", title_justify="left")
    for column in header:
        rich_table.add_column(column, justify="left" if column == "features" else "right")
    for row in rows:
        rich_table.add_row(*row)
    return rich_table


def capacity_markdown(table: CapacityTable) -> str:
    header, *rows = _capacity_rows(table)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@main.command("crds")
@click.option("--write", is_flag=True, help="Write them into crds/ instead of printing.")
def crds_command(write: bool) -> None:
    """The CustomResourceDefinitions, generated from the data models."""
    from tessera.operator.crds import rendered

    for path, text in rendered().items():
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            click.echo(f"wrote {path}")
        else:
            click.echo("---\n" + text)


from tessera.simulate_cli import simulate  # noqa: E402  (it reuses the options defined above)

main.add_command(simulate)
