"""The `tessera` command line: everything the operator decides, reproducible from files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import yaml
from rich.console import Console
from rich.progress import Progress

from tessera import __version__
from tessera.logs import configure_logging
from tessera.planner.capacity import capacity
from tessera.planner.catalog import CATALOG
from tessera.planner.features import Features, all_feature_sets
from tessera.planner.measured import load_parvagpu_dir
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.profile_sources import build_profile_store
from tessera.exit_codes import BAD_INPUT, INFEASIBLE, OK, PLANNER_FAILED, TIME_LIMIT
from tessera.planner.contract import Infeasible, TimeLimit, plan_outcome
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import SpecFileError, load_systems
from tessera.place_cli import place
from tessera.render import capacity_markdown, capacity_rich, render_plan
from tessera.shipped import default_example_systems
from tessera.twin_cli import twin


@click.group()
@click.version_option(__version__, prog_name="tessera")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
              show_default=True, help="Messages of tessera's modules at this level and above go to stderr.")
def main(log_level: str) -> None:
    """Serve GPU inference at the lowest GPU cost that meets its SLOs."""
    configure_logging(log_level)


main.add_command(twin)
main.add_command(place)


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
        click.option("--batches", type=BATCHES, default=",".join(map(str, PlannerOptions().batches)),
                     show_default=True, help="Batch sizes to profile and plan, comma-separated (e.g. up to 128)."),
        click.option("--max-batch", type=click.IntRange(min=1), default=None,
                     help="The largest batch a model server accepts (default: the largest of --batches)."),
        click.option("--max-mps", type=click.IntRange(min=1, max=48), default=PlannerOptions().max_mps,
                     show_default=True, help="Most server processes sharing one MIG instance (MPS)."),
        click.option("--tier-ratio", type=click.FloatRange(min=1), default=PlannerOptions().tier_ratio,
                     show_default=True, help="Option tiers on pools above --exact-up-to GPUs; 1 is exact."),
        click.option("--busy-instances", type=click.IntRange(min=0), default=PlannerOptions().busy_instances,
                     show_default=True, help="Busy-task pruning on pools above --exact-up-to GPUs; 0 is exact."),
        click.option("--exact-up-to", "exact_up_to_gpus", type=click.IntRange(min=0),
                     default=PlannerOptions().exact_up_to_gpus, show_default=True,
                     help="Pools of at most this many GPUs ignore --tier-ratio and --busy-instances (exact)."),
        click.option("--slice-tolerance", type=click.FloatRange(min=0, min_open=True),
                     default=PlannerOptions().slice_tolerance, show_default=True,
                     help="Slices the cost may stay above its proven bound (1: the fewest)."),
        click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path)),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class _Batches(click.ParamType):
    name = "sizes"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            sizes = tuple(sorted({int(part) for part in str(value).split(",") if part.strip()}))
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of batch sizes", param, ctx)
        if not sizes or sizes[0] < 1:
            self.fail(f"{value!r}: batch sizes must be integers >= 1", param, ctx)
        return sizes


BATCHES = _Batches()


def _options(levels: float, headroom: float, time_limit: float, **approximations) -> PlannerOptions:
    return PlannerOptions(budget_levels=levels, headroom=headroom, time_limit_s=time_limit, **approximations)


def _console(to_stderr: bool) -> Console:
    """Wide enough for the plan table when the output is a file or a pipe, not a terminal."""
    console = Console(stderr=to_stderr)
    return console if console.is_terminal else Console(stderr=to_stderr, width=160)


def _load(files: tuple[Path, ...]) -> list[SystemSpec]:
    paths = files or default_example_systems()
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


def _store(systems, gpu: str, measured: Path | None, options: PlannerOptions):
    try:
        return build_profile_store(systems, gpu, _measured(measured), options.batches, max_mps=options.max_mps)
    except ValueError as error:
        raise click.ClickException(str(error)) from None


@main.command("plan")
@_pool_options
@click.option("--features", default="A+S+T", show_default=True,
              help="Feature switches: A, S, T joined by '+', or 'unopt'.")
@click.option("--output", type=click.Choice(["table", "yaml", "json"]), default="table", show_default=True)
def plan_command(files, gpu, gpus, measured, features, output, **planner) -> None:
    """Plan compound systems (YAML FILES; the built-in examples when none) on a GPU pool.

    Exit codes: 0 planned (also when the time limit cut the proof short: the
    summary says by how much), 2 bad input, 3 infeasible (the best partial
    plan is printed when there is one), 4 time limit without a plan,
    5 planner failure.
    """
    systems = _load(files)
    try:
        chosen = Features.parse(features)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    options = _options(**planner)
    console = _console(output != "table")
    with console.status(f"Solving the MILP for {len(systems)} system(s) on {gpus} x {gpu}..."):
        outcome = plan_outcome(systems, Pool(gpu=gpu, gpus=gpus), _measured(measured), chosen, options)
    result = getattr(outcome, "plan", None)
    if result is None:
        _no_plan(outcome, output)
    elif output == "table":
        render_plan(result, console)
    elif output == "json":
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(yaml.safe_dump(json.loads(result.model_dump_json()), sort_keys=False))
    if isinstance(outcome, TimeLimit):
        click.echo(f"warning: {outcome.reason}", err=True)
    sys.exit(OUTCOME_EXIT_CODES[outcome.kind] if result is None or isinstance(outcome, Infeasible) else OK)


OUTCOME_EXIT_CODES = {"planned": OK, "invalid-input": BAD_INPUT, "infeasible": INFEASIBLE, "time-limit": TIME_LIMIT,
                      "planner-failed": PLANNER_FAILED}


def _no_plan(outcome, output: str) -> None:
    if output == "json":
        click.echo(outcome.model_dump_json(indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(json.loads(outcome.model_dump_json()), sort_keys=False))
    click.echo(f"error ({outcome.kind}): {outcome.reason}", err=True)
    for line in getattr(outcome, "diagnosis", []) + getattr(outcome, "errors", []):
        click.echo(f"  {line}", err=True)


def _measured(measured: Path | None):
    try:
        return load_parvagpu_dir(measured) if measured else None
    except ValueError as error:
        raise click.ClickException(str(error)) from None


@main.command("capacity")
@_pool_options
@click.option("--features", "feature_list", default="all", show_default=True,
              help="Comma-separated feature subsets (e.g. 'unopt,A+T,A+S+T'), or 'all'.")
@click.option("--output", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
def capacity_command(files, gpu, gpus, measured, feature_list, output, **planner) -> None:
    """The most demand the pool serves with each feature subset, and ratios to Unopt and A+T."""
    systems = _load(files)
    try:
        feature_sets = (all_feature_sets() if feature_list == "all"
                        else [Features.parse(f) for f in feature_list.split(",")])
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    options = _options(**planner)
    store = _store(systems, gpu, measured, options)
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
