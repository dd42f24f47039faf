"""Plans and capacity results as terminal tables."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from tessera.planner.capacity import CapacityTable
from tessera.planner.catalog import COMPUTE_SLICES
from tessera.planner.plan import ConfigPlan, CostProof, Plan
from tessera.planner.profiles import ProfileSource


def _source(source: ProfileSource) -> Text:
    style = {"measured": "green", "given": "cyan", "estimated": "yellow"}[source.value]
    label = "estimate" if source is ProfileSource.ESTIMATED else source.value
    return Text(label, style=style)


def task_table(plan: Plan) -> Table:
    table = Table(title=f"Plan: {plan.pool_gpus} x {plan.gpu}, features {plan.features}", title_justify="left")
    for column in ("system", "task", "variant", "acc", "demand/s", "segment", "batch", "replicas",
                   "batch ms", "stage ms", "budget ms", "capacity/s", "profile"):
        table.add_column(column, justify="right" if column not in ("system", "task", "variant", "segment", "profile") else "left")
    for task in plan.tasks:
        rows: list[ConfigPlan | None] = list(task.configs) or [None]
        for position, config in enumerate(rows):
            head = [task.system, task.task, task.variant, f"{task.normalised_accuracy:.3f}",
                    f"{task.demand_rps:.1f}"] if position == 0 else [""] * 5
            if config is None:
                table.add_row(*head, "-", "-", "0", "-", "-", f"{task.budget_ms:.0f}", "0", "")
                continue
            table.add_row(
                *head, str(config.segment), str(config.batch), str(config.replicas),
                f"{config.batch_latency_ms:.1f}", f"{config.stage_latency_ms:.1f}",
                f"{task.budget_ms:.0f}" if position == 0 else "",
                f"{config.replicas * config.segment_throughput_rps:.0f}", _source(config.source),
            )
        table.add_section()
    return table


def gpu_table(plan: Plan) -> Table:
    table = Table(title="MIG layouts", title_justify="left")
    table.add_column("GPUs", justify="right")
    table.add_column("layout")
    table.add_column("instances (task)")
    groups: dict[tuple, list[int]] = {}
    for gpu in plan.gpus:
        occupants = tuple(f"{i.mig_profile}:{i.task or 'idle'}" for i in gpu.instances)
        groups.setdefault((tuple(map(tuple, gpu.layout)), occupants), []).append(gpu.index)
    for (layout, occupants), indices in groups.items():
        table.add_row(_ranges(indices), " + ".join(f"{count}x {name}" for name, count in layout), ", ".join(occupants))
    return table


def _ranges(indices: list[int]) -> str:
    parts, start = [], None
    for position, index in enumerate(indices):
        if start is None:
            start = index
        last = position == len(indices) - 1
        if last or indices[position + 1] != index + 1:
            parts.append(f"{start}" if start == index else f"{start}-{index}")
            start = None
    return ",".join(parts)


def latency_model(plan: Plan) -> str:
    """Which latency model the plan's latencies come from, in words (docs/planner.md)."""
    spread = f"estimates x {plan.latency_spread:g} as p99"
    measured = sorted({round(c.latency_spread, 3) for t in plan.tasks for c in t.configs
                       if c.source.value == "estimated" and abs(c.latency_spread - plan.latency_spread) > 1e-9})
    if measured:
        spread += f", x their variant's measured p99/p50 where it has one ({', '.join(f'{s:g}' for s in measured)})"
    if not plan.queueing:
        return f"batching only, no queueing wait (optimistic under load); {spread}"
    if plan.routing.value == "one-replica":
        routing = "whole fan-out bulks on any replica"
    elif plan.routing.value == "per-request":
        routing = "bulks split per request in proportion to planned load"
    else:
        routing = f"bulks split over a Service's {plan.connections} pinned connections (p99 share)"
    split = any(t.share_base_rps > 0 for t in plan.tasks)
    note = "" if split or plan.routing.value == "one-replica" else " (not all demand served: whole bulks)"
    return f"p99 queueing wait in rounds of batches, {routing}{note}; {spread}"


def summary_table(plan: Plan) -> Table:
    table = Table(title="Summary", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("GPUs used", f"{plan.gpus_used} of {plan.pool_gpus} {plan.gpu}")
    table.add_row("compute slices used", f"{plan.slices_used} of {COMPUTE_SLICES * plan.pool_gpus}")
    for s in plan.systems:
        served = "all" if s.served_rps >= s.demand_rps * (1 - 1e-5) else f"{s.served_rps:.1f}"
        table.add_row(f"{s.system}: demand served", f"{served} of {s.demand_rps:.1f} req/s")
        table.add_row(f"{s.system}: accuracy (worst path)", f"{s.worst_path_accuracy:.3f} vs SLO {s.accuracy_slo:.3f}")
        table.add_row(f"{s.system}: latency (worst path)",
                      f"{s.worst_path_latency_ms:.1f} ms vs SLO {s.latency_slo_ms:.0f} ms")
    headroom = [t.capacity_rps / t.demand_rps - 1 for t in plan.tasks if t.demand_rps > 0]
    if headroom:
        table.add_row("capacity headroom", f"min {100 * min(headroom):.0f}% over demand per task "
                                           f"(planned >= {100 * plan.headroom:.0f}%)")
    sources = ", ".join(f"{count} {source}" for source, count in sorted(plan.profile_sources.items()))
    table.add_row("profile sources", sources or "-")
    table.add_row("latency model", latency_model(plan))
    solver = plan.solver
    table.add_row("solver", f"HiGHS {solver.status}, gap {100 * solver.mip_gap:.2f}%, "
                            f"build {solver.build_s:.2f} s, solve {solver.solve_s:.2f} s, "
                            f"{solver.variables} variables, {solver.constraints} constraints")
    table.add_row("objective stages", ", ".join(f"{k}={v:.4g}" for k, v in solver.objective.items()))
    kept = f" (kept as in force: {len(solver.kept)} systems)" if solver.kept else ""
    kept += f" (solved once for identical systems: {len(solver.reused)} parts reused)" if solver.reused else ""
    table.add_row("made", solver.method + kept + (f" ({solver.fallback})" if solver.fallback else ""))
    if solver.cost:
        table.add_row("cost proof", _cost_proof(solver.cost))
    if plan.changes:
        table.add_row("layout changes", plan.changes.summary)
    if solver.time_limited:
        table.add_row(Text("time limit", style="yellow"), f"stopped {', '.join(solver.time_limited)}")
    for line in plan.diagnosis:
        table.add_row(Text("diagnosis", style="red"), line)
    return table


def _cost_proof(cost: CostProof) -> str:
    if cost.proven:
        return f"{cost.gpus} GPUs and {cost.slices} slices, proven the fewest"
    return (f"{cost.gpus} GPUs (proven >= {cost.gpus_lower_bound}), {cost.slices} slices (proven >= "
            f"{cost.slices_lower_bound}): the time limit cut the proof short")


def render_plan(plan: Plan, console: Console) -> None:
    console.print(Group(task_table(plan), gpu_table(plan), summary_table(plan)))
    if "estimated" in plan.profile_sources:
        console.print(Text("Profiles marked 'estimate' come from the built-in analytical model, "
                           "not a measurement: run the profiler before trusting them.", style="yellow"))


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
