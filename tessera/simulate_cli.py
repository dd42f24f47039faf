"""`tessera simulate`: plan systems, then run the plan under a bursty demand trace."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import Progress
from rich.table import Table

from tessera import exit_codes
from tessera.cli_inputs import _console, _load, _naming_files, _pool_options, _store
from tessera.planner_options_cli import take_planner_options
from tessera.options import BoundedInt, FiniteFloat, OutputFile
from tessera.planner.input_files import InputError
from tessera.planner.features import Features
from tessera.planner.model import Pool
from tessera.planner.simulation.policies import Balancing, Batcher, Policies
from tessera.planner.simulation.workloads import BUILT_IN, RateTrace, built_in, replay_csv
from tessera.planner.solve import NoPlanError

if TYPE_CHECKING:
    from tessera.planner.simulation.experiments import PlanOutcome


MAX_DURATION_S = 86_400.0
MAX_SOURCE_REQUESTS = 20_000_000


def _trace(value: str, duration_s: float) -> RateTrace:
    try:
        return built_in(value, duration_s) if value in BUILT_IN else replay_csv(value)
    except (ValueError, OSError) as error:
        raise click.BadParameter(str(error), param_hint="--trace") from None


@click.command("simulate")
@_pool_options
@click.option("--trace", "trace_name", default="mmpp", show_default=True,
              help=f"A built-in trace ({', '.join(sorted(BUILT_IN))}) or a CSV file time_s,rate (replayed).")
@click.option("--duration", type=FiniteFloat(1, MAX_DURATION_S), default=600, show_default=True,
              help="Seconds of a built-in trace.")
@click.option("--features", default="A+S+T", show_default=True, help="Feature switches the plan uses.")
@click.option("--plan-for", type=click.Choice(["mean", "p95"]), default="mean", show_default=True,
              help="Plan for the trace's mean demand (the spec's demand_rps) or its p95 rate.")
@click.option("--balancing", type=click.Choice([b.value for b in Balancing]), default=Balancing.PER_CONNECTION.value,
              show_default=True, help="per-connection: kube-proxy; random: per request (the optimistic bound).")
@click.option("--batcher", type=click.Choice([b.value for b in Batcher]), default=Policies().batcher.value,
              show_default=True, help="when-free: Triton's dynamic batcher; timer: MLServer's adaptive batching.")
@click.option("--spread", type=FiniteFloat(1, 100), default=Policies().p99_over_p50, show_default=True,
              help="Batch latency p99/p50 (lognormal).")
@click.option("--seed", type=BoundedInt(0, 2**32 - 1), default=0, show_default=True)
@click.option("--png", type=OutputFile(), default=Path("simulation.png"),
              show_default=True, help="Where to write the plot.")
def simulate(files, gpu, gpus, measured, trace_name, duration, features, plan_for, balancing, batcher,
             spread, seed, png, **planner) -> None:
    """Plan systems (YAML FILES; the built-in examples when none), then simulate the plan under a trace.

    Needs the numba and offline extras (the compiled replica loop, the plot).
    """
    try:
        from tessera.planner.simulation.experiments import plan_and_simulate, stage_count
        from tessera.planner.simulation.plot import write_png
    except ModuleNotFoundError as error:
        raise click.ClickException(f"tessera simulate needs {error.name}: pip install 'tessera[numba,offline]'") from None
    systems, origins = _load(files)
    try:
        chosen = Features.parse(features)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--features") from None
    trace = _trace(trace_name, duration)
    expected = sum(s.demand_rps for s in systems) * trace.duration_s
    if expected > MAX_SOURCE_REQUESTS:
        raise InputError(f"--duration/--trace: {trace.duration_s:g} s at the systems' demand is {expected:.3g} source "
                         f"requests, over the limit of {MAX_SOURCE_REQUESTS:g}: shorten the trace")
    options = take_planner_options(planner)
    with _naming_files(origins):
        store = _store(systems, gpu, measured, options)
    policies = Policies(balancing=Balancing(balancing), batcher=Batcher(batcher), connections=options.connections,
                        p99_over_p50=spread, seed=seed)
    console = _console(False)
    try:
        with _naming_files(origins), Progress(console=console, transient=True) as progress:
            bar = progress.add_task(f"Planning on {gpus} x {gpu}, then simulating {trace.duration_s:.0f} s of "
                                    f"{trace.name}", total=2 * stage_count(systems))
            outcome = plan_and_simulate(systems, Pool(gpu=gpu, gpus=gpus), store, trace, chosen, options, policies,
                                        plan_for, progress=lambda steps: progress.advance(bar, steps))
    except NoPlanError as error:
        console.print(f"[red]No plan:[/red] {error}")
        sys.exit(exit_codes.INFEASIBLE)
    console.print(f"Trace {trace.name}: {trace.duration_s:.0f} s, p95 rate {trace.p95():.2f} x the mean")
    console.print(outcome_table(outcome))
    plain = outcome.without_dropping
    console.print(f"GPUs used {outcome.gpus_used}; slices allocated {plain.allocated_slices}/{plain.pool_slices} "
                  f"({plain.slice_use_pct:.1f}% slice use); processes busy {plain.busy_use_pct:.1f}% "
                  f"(slice-weighted); balancing {plain.balancing}"
                  + (f" over {plain.connections} connections per task" if plain.balancing == "per-connection" else ""))
    if outcome.unserved:
        console.print(f"[yellow]Not simulated: the plan serves none of {', '.join(outcome.unserved)}[/yellow]")
    slo = {s.system: s.slo_ms for s in plain.systems}
    write_png(outcome.series, outcome.dropping_series, slo, png,
              f"{outcome.features}, planned for the {plan_for} rate, {trace.name} trace")
    console.print(f"Wrote {png}")


def outcome_table(outcome: PlanOutcome) -> Table:
    table = Table(title=f"{outcome.features} planned for the trace's {outcome.planned_for} rate "
                        f"(x{outcome.demand_scale:.2f} of the spec's demand)", title_justify="left")
    for column in ("system", "requests", "SLO ms", "p50 ms", "p99 ms", "late % (no dropping)",
                   "dropped % (early dropping)", "late % (early dropping)", "capacity req/s"):
        table.add_column(column, justify="left" if column == "system" else "right")
    dropping = {s.system: s for s in outcome.with_dropping.systems}
    for plain in outcome.without_dropping.systems:
        dropped = dropping[plain.system]
        table.add_row(plain.system, f"{plain.requests:,}", f"{plain.slo_ms:g}", f"{plain.p50_ms:.1f}",
                      f"{plain.p99_ms:.1f}", f"{plain.violation_pct:.2f}", f"{dropped.drop_pct:.2f}",
                      f"{dropped.violation_pct:.2f}", f"{plain.capacity_rps:.1f}")
    return table
