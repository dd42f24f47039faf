"""The `tessera` command line: everything the operator decides, reproducible from files."""

from __future__ import annotations

import json
import sys

import click
import yaml
from rich.progress import Progress

from tessera import __version__
from tessera.exit_codes import BAD_INPUT, INFEASIBLE, OK, PLANNER_FAILED, TIME_LIMIT
from tessera.logs import configure_logging
from tessera.planner.capacity import capacity
from tessera.planner.contract import Infeasible, InvalidInput, TimeLimit, plan_outcome
from tessera.planner.features import Features, all_feature_sets
from tessera.planner.input_files import InputError
from tessera.planner.model import Pool
from tessera.frontend_cli import frontend, frontend_config_command
from tessera.operator_cli import operator
from tessera.place_cli import place
from tessera.planner_options_cli import take_planner_options
from tessera.profiles_cli import profiles
from tessera.render import capacity_markdown, capacity_rich, render_plan
from tessera.cli_inputs import BadInput, _console, _load, _measured, _naming_files, _pool_options, _store
from tessera.simulate_cli import simulate
from tessera.twin_cli import twin
from tessera.weights_cli import weights


class _Main(click.Group):
    """Every command's refused input (InputError, from any file it reads) exits BAD_INPUT with its message."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as error:
            raise BadInput(str(error)) from None


@click.group(cls=_Main)
@click.version_option(__version__, prog_name="tessera")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
              show_default=True, help="Messages of tessera's modules at this level and above go to stderr.")
def main(log_level: str) -> None:
    """Serve GPU inference at the lowest GPU cost that meets its SLOs."""
    configure_logging(log_level)


main.add_command(twin)
main.add_command(place)
main.add_command(operator)
main.add_command(frontend)
main.add_command(frontend_config_command)
main.add_command(profiles)
main.add_command(weights)


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
    systems, origins = _load(files)
    try:
        chosen = Features.parse(features)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    options = take_planner_options(planner)
    console = _console(output != "table")
    with _naming_files(origins), console.status(
            f"Solving the MILP for {len(systems)} system(s) on {gpus} x {gpu}..."):
        outcome = plan_outcome(systems, Pool(gpu=gpu, gpus=gpus), _measured(measured), chosen, options)
    if isinstance(outcome, InvalidInput) and outcome.system in origins:
        raise BadInput(f"{origins[outcome.system]}: {outcome.reason}")
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



@main.command("capacity")
@_pool_options
@click.option("--features", "feature_list", default="all", show_default=True,
              help="Comma-separated feature subsets (e.g. 'unopt,A+T,A+S+T'), or 'all'.")
@click.option("--output", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
def capacity_command(files, gpu, gpus, measured, feature_list, output, **planner) -> None:
    """The most demand the pool serves with each feature subset, and ratios to Unopt and A+T."""
    systems, origins = _load(files)
    try:
        feature_sets = (all_feature_sets() if feature_list == "all"
                        else list({f.label: f for f in map(Features.parse, feature_list.split(","))}.values()))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    options = take_planner_options(planner)
    console = _console(output != "table")
    with _naming_files(origins), Progress(console=console, transient=True) as progress:
        store = _store(systems, gpu, measured, options)
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
@click.option("--write", is_flag=True,
              help="Write them into crds/ (and the Helm chart's crds/), and their field reference into docs/api-reference.md, instead of printing.")
def crds_command(write: bool) -> None:
    """The CustomResourceDefinitions, generated from the data models."""
    from tessera.operator.api.reference import reference_file
    from tessera.operator.api.crds import CHART_CRDS_DIR, rendered

    for path, text in rendered().items():
        if write:
            copies = [path, CHART_CRDS_DIR / path.name] if CHART_CRDS_DIR.is_dir() else [path]
            for copy in copies:
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_text(text)
                click.echo(f"wrote {copy}")
        else:
            click.echo("---\n" + text)
    if write:
        path, text = reference_file()
        path.write_text(text)
        click.echo(f"wrote {path}")

main.add_command(simulate)
