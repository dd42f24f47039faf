"""`tessera place FILE`: pack an AdapterPool's adapters onto the fewest GPUs, checked by the twin."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import click
import yaml
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tessera import exit_codes
from tessera.options import SEED, WORKERS
from tessera.planner.input_files import quote
from tessera.planner.placement import (BASELINES, GateLog, Placement, PlacementReport, Replacement, ServerPlacement,
                                       plan_placement)
from tessera.planner.placement.pool_file import PoolFileError, load_previous_placement, load_problem
from tessera.planner.placement.twin_check import TwinCheckTooLarge


@click.command("place")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--output", type=click.Choice(["table", "yaml", "json"]), default="table", show_default=True)
@click.option("--no-twin", is_flag=True, help="Skip the twin check (one simulated hour per server, ~1-5 s each).")
@click.option("--workers", type=WORKERS, default=1, show_default=True,
              help="Processes running twin checks.")
@click.option("--baselines", default=",".join(BASELINES), show_default=True,
              help="Comma-separated baselines placed and checked beside tessera ('' for none).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the twin's request streams and the random baseline.")
@click.option("--previous", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An earlier `tessera place --output json|yaml`: re-place against it, moving as few adapters as possible.")
def place(file: Path, output: str, no_twin: bool, workers: int, baselines: str, seed: int,
          previous: Path | None) -> None:
    """Place the adapters of the AdapterPool in FILE: servers with --max-loras, --max-lora-rank and adapters,
    predicted and twin-checked health, and servers used against each baseline and the lower bound."""
    problem = load_problem(file)  # refused input exits BAD_INPUT through the main group
    earlier = load_previous_placement(previous) if previous else None
    chosen = tuple(b for b in baselines.split(",") if b)
    unknown = set(chosen) - set(BASELINES)
    if unknown:
        raise click.BadParameter(f"unknown baselines {quote(sorted(unknown))}; known: {', '.join(BASELINES)}",
                                 param_hint="--baselines")
    console = Console(stderr=output != "table")
    if not console.is_terminal:
        console = Console(stderr=output != "table", width=150)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True, disable=no_twin) as progress:
        bar = progress.add_task("twin check", total=None)
        try:
            report = plan_placement(problem, twin_check=not no_twin, baselines=chosen, workers=workers, seed=seed,
                                    previous=earlier, progress=lambda strategy, done, total: progress.update(
                                        bar, completed=done, total=total, description=f"twin check ({strategy})"))
        except TwinCheckTooLarge as error:
            index = [a.name for a in problem.adapters].index(error.adapter)
            baseline = f", leave out the {error.strategy} baseline (--baselines)" if error.strategy != "tessera" else ""
            raise PoolFileError(f"{file}: spec.adapters[{index}].expectedRequestsPerSecond: {error}: lower the rate"
                                f"{baseline} or skip the check (--no-twin)") from None
    if output == "table":
        console.print(Group(servers_table(report.placement), comparison_table(report)))
        for placement in (report.placement, *report.baselines):
            disagree = [str(s.index) for s in placement.servers if s.disagrees]
            if disagree:
                console.print(Text(f"{placement.strategy}: twin and predictors disagree on server(s) "
                                   f"{', '.join(disagree)}", style="yellow"))
        if report.gate:
            console.print(gate_line(report.gate))
        if report.replacement:
            console.print(replacement_line(report.replacement, len(problem.adapters)))
        for note in report.notes:
            console.print(Text(f"note: {note}", style="yellow"))
    else:
        data = report_dict(report)
        click.echo(json.dumps(data, indent=2) if output == "json" else yaml.safe_dump(data, sort_keys=False))
    failure = placement_failure(report.placement)
    if failure:
        click.echo(f"infeasible: {failure}" + (f" ({gate_line(report.gate)})" if report.gate else ""), err=True)
        sys.exit(exit_codes.INFEASIBLE)


def placement_failure(placement: Placement) -> str:
    """Why the placement is no success ('' when it is one), naming the servers and their adapters. When
    the twin checked it, the twin decides: a server it fails is a failure whatever the predictors say of
    it, and one it passes is a success even where the predictors call it unhealthy (the twin gate keeps
    only such servers)."""
    if placement.unplaced:
        return (f"{len(placement.unplaced)} adapters beyond the pool's server limit are not placed: "
                f"{_names(placement.unplaced)}")
    if placement.twin_checked:
        return _listed([twin_failure(s) for s in placement.servers if not (s.twin and s.twin.passed)])
    return _listed([f"server {s.index} is predicted unhealthy ({_count(len(s.adapters), 'adapter')}: "
                    f"{_names(s.adapters)})" for s in placement.servers if not s.predicted_ok])


def _listed(failures: list[str], shown: int = 5) -> str:
    """The first few servers' failures, and how many more servers fail (a message, not a dump)."""
    more = f"; and {_count(len(failures) - shown, 'more server')}" if len(failures) > shown else ""
    return "; ".join(failures[:shown]) + more


def gate_line(log: GateLog) -> str:
    return (f"twin gate: {_count(log.splits, 'server')} split, {log.moves_kept} of {log.moves_tried} merges or "
            f"emptyings kept, {_count(log.hours, 'simulated hour')} ({log.confirm_hours} confirming, "
            f"{log.hours - log.confirm_hours} of at most {log.max_hours} on splits and moves; {log.wall_s:.1f} s)"
            + (", its hours spent" if log.hours_ran_out else ""))


def twin_failure(server: ServerPlacement) -> str:
    """What the twin check found wrong with one server, and which adapters."""
    twin = server.twin
    head = f"server {server.index} ({_count(len(server.adapters), 'adapter')}, {server.rate_rps:.2f} req/s)"
    if twin is None:
        return f"{head} was not twin-checked"
    if not twin.starts:
        return f"{head} cannot start with --max-loras {server.max_loras} --max-lora-rank {server.max_lora_rank}"
    found = []
    if twin.starved:
        found.append(f"starved ({twin.ratio:.3f} of offered)")
    if twin.adapters_under_bound:
        found.append(f"{_count(len(twin.adapters_under_bound), 'adapter')} under the service bound (worst served "
                     f"{twin.min_served_fraction:.3f}): {_names(twin.adapters_under_bound)}")
    if twin.adapters_over_ttft:
        found.append(f"{_count(len(twin.adapters_over_ttft), 'adapter')} over the p99 time-to-first-token bound: "
                     f"{_names(twin.adapters_over_ttft)}")
    return f"{head} fails the twin check: {', '.join(found)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _names(names: tuple[str, ...] | list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" +{len(names) - shown} more" if len(names) > shown else "")


def _adapters_cell(server: ServerPlacement, shown: int = 2) -> str:
    names = list(server.adapters)
    return ", ".join(names[:shown]) + (f" +{len(names) - shown}" if len(names) > shown else "")


def _twin_cells(server: ServerPlacement) -> list[str]:
    twin = server.twin
    if twin is None:
        return ["-", "-", "-"]
    if not twin.starts:
        return ["cannot start", "-", "FAIL"]
    verdict = "pass" if twin.passed else "FAIL"
    if server.disagrees:
        verdict += " (disagrees)"
    return [f"{twin.ratio:.3f}", f"{twin.min_served_fraction:.3f}", verdict]


def servers_table(placement: Placement) -> Table:
    table = Table(title=f"Placement ({placement.strategy}): {placement.servers_used} servers, {placement.model} "
                        f"(predicted and twin: throughput / offered over one hour)", title_justify="left")
    for column in ("server", "--max-loras", "--max-lora-rank", "adapters", "req/s", "predicted", "busy/slot",
                   "twin", "worst served", "twin check"):
        table.add_column(column, justify="left" if column == "twin check" else "right")
    table.add_column("adapter names", no_wrap=True, overflow="ellipsis", max_width=40)
    for server in placement.servers:
        predicted = server.predicted
        table.add_row(
            str(server.index), str(server.max_loras), str(server.max_lora_rank), str(len(server.adapters)),
            f"{server.rate_rps:.2f}",
            "cannot start" if predicted is None else f"{predicted.ratio:.3f}" + (" starved" if predicted.starved else ""),
            "-" if predicted is None else f"{predicted.busy_per_slot:.2f}", *_twin_cells(server), _adapters_cell(server))
    if placement.unplaced:
        table.caption = f"{len(placement.unplaced)} adapters beyond the pool's server limit: not placed"
    return table


def _comparison_row(placement: Placement, bound: int) -> list[str]:
    checked = placement.twin_checked
    return [
        placement.strategy, str(placement.servers_used), f"{placement.servers_used - bound:+d}",
        str(placement.count(lambda s: not s.starts)),
        str(placement.count(lambda s: s.starts and not s.predicted_ok)),
        str(placement.count(lambda s: s.twin is not None and s.twin.starts and s.twin.starved)) if checked else "-",
        str(sum(len(set(s.twin.adapters_under_bound) | set(s.twin.adapters_over_ttft))
                for s in placement.servers if s.twin)) if checked else "-",
        str(placement.count(lambda s: s.disagrees)) if checked else "-",
        ("pass" if placement.twin_ok else "FAIL") if checked else "not checked",
        f"{placement.place_s * 1000:.0f}", f"{placement.twin_s:.1f}" if checked else "-",
    ]


def comparison_table(report: PlacementReport) -> Table:
    bound = report.lower_bound
    table = Table(title=f"{report.adapters} adapters, {report.rate_rps:.1f} req/s: servers against the baselines "
                        f"and the lower bound ({bound.servers})", title_justify="left")
    for column in ("strategy", "servers", "vs bound", "cannot start", "predicted unhealthy", "twin starved",
                   "adapters failing", "disagree", "twin check", "place ms", "twin s"):
        table.add_column(column, justify="left" if column in ("strategy", "twin check") else "right")
    for placement in (report.placement, *report.baselines):
        table.add_row(*_comparison_row(placement, bound.servers))
    table.add_row("lower bound", str(bound.servers), "+0", *[""] * 8)
    table.caption = f"lower bound: {bound.argument}"
    return table


def replacement_line(replacement: Replacement, adapters: int) -> Text:
    restarted = f", {len(replacement.restarted)} server(s) restarted ({', '.join(map(str, replacement.restarted))})" \
        if replacement.restarted else ""
    return Text(f"re-placed: {replacement.moves} of {adapters} adapters move ({100 * replacement.moves / max(adapters, 1):.1f}%)"
                f"{restarted}; {len(replacement.added)} added, {len(replacement.removed)} removed")


def _clean(value):
    """JSON-safe: NaN becomes null, tuples lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _placement_dict(placement: Placement) -> dict:
    data = dataclasses.asdict(placement)
    data.update(servers_used=placement.servers_used, predicted_ok=placement.predicted_ok,
                twin_ok=placement.twin_ok if placement.twin_checked else None,
                disagreeing_servers=[s.index for s in placement.servers if s.disagrees])
    return data


def report_dict(report: PlacementReport) -> dict:
    return _clean({
        "pool": report.problem_name, "model": report.model, "adapters": report.adapters,
        "rateRps": report.rate_rps, "lowerBound": dataclasses.asdict(report.lower_bound),
        "placement": _placement_dict(report.placement),
        "gate": None if report.gate is None else dataclasses.asdict(report.gate),
        "baselines": [_placement_dict(p) for p in report.baselines], "notes": list(report.notes),
        "replacement": None if report.replacement is None else {
            "moves": report.replacement.moves, "moved": list(report.replacement.moved),
            "restarted": list(report.replacement.restarted), "added": list(report.replacement.added),
            "removed": list(report.replacement.removed)},
    })
