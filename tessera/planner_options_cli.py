"""The planner's options on a command line: the same flags, bounds and defaults for
`tessera plan`, `capacity` and `simulate` and for `tessera operator`, so that every
approximation has its switch back to exact wherever the planner runs."""

from __future__ import annotations

from typing import Any, Callable

import click

from tessera.options import BoundedInt, FiniteFloat
from tessera.planner.catalog import COMPUTE_SLICES
from tessera.planner.input_files import shorten
from tessera.planner.latency import Routing
from tessera.planner.solve import PlannerOptions

MAX_POOL_GPUS = 10_000
MAX_BUDGET_LEVELS = 100
MAX_HEADROOM = 10.0
MAX_TIME_LIMIT_S = 86_400.0
MAX_BATCH_SIZE = 4096
MAX_BATCH_SIZES = 32
MAX_TIER_RATIO = 100.0
MAX_LATENCY_SPREAD = 10.0
MAX_CONNECTIONS = 1024
DEFAULTS = PlannerOptions()


class _Batches(click.ParamType):
    name = "sizes"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        if len(str(value)) > 512:
            self.fail("the list of batch sizes is longer than 512 characters", param, ctx)
        try:
            sizes = tuple(sorted({int(part) for part in str(value).split(",") if part.strip()}))
        except ValueError:
            self.fail(f"{shorten(str(value))} is not a comma-separated list of batch sizes", param, ctx)
        if not sizes or sizes[0] < 1 or sizes[-1] > MAX_BATCH_SIZE or len(sizes) > MAX_BATCH_SIZES:
            self.fail(f"{shorten(str(value))}: expected at most {MAX_BATCH_SIZES} batch sizes, "
                      f"each an integer in [1, {MAX_BATCH_SIZE}]", param, ctx)
        return sizes


BATCHES = _Batches()


def planner_options(time_limit_flag: str = "--time-limit") -> Callable[[Any], Any]:
    """A decorator adding the planner's options; the solver's time limit under `time_limit_flag`."""
    options = [
        click.option("--levels", type=BoundedInt(1, MAX_BUDGET_LEVELS), default=DEFAULTS.budget_levels,
                     show_default=True, help="Latency budget levels per task."),
        click.option("--headroom", type=FiniteFloat(0, MAX_HEADROOM), default=DEFAULTS.headroom,
                     show_default=True, help="Capacity kept above demand, as a fraction."),
        click.option(time_limit_flag, "time_limit", type=FiniteFloat(1, MAX_TIME_LIMIT_S),
                     default=DEFAULTS.time_limit_s, show_default=True, help="Seconds the solver may spend per plan."),
        click.option("--batches", type=BATCHES, default=",".join(map(str, DEFAULTS.batches)),
                     show_default=True, help="Batch sizes to profile and plan, comma-separated (e.g. up to 128)."),
        click.option("--max-batch", type=BoundedInt(1, MAX_BATCH_SIZE), default=None,
                     help="The largest batch a model server accepts (default: the largest of --batches)."),
        click.option("--max-mps", type=click.IntRange(min=1, max=48), default=DEFAULTS.max_mps,
                     show_default=True, help="Most server processes sharing one MIG instance (MPS)."),
        click.option("--tier-ratio", type=FiniteFloat(1, MAX_TIER_RATIO), default=DEFAULTS.tier_ratio,
                     show_default=True, help="Option tiers on pools above --exact-up-to GPUs; 1 is exact."),
        click.option("--busy-instances", type=BoundedInt(0, MAX_POOL_GPUS), default=DEFAULTS.busy_instances,
                     show_default=True, help="Busy-task pruning on pools above --exact-up-to GPUs; 0 is exact."),
        click.option("--exact-up-to", "exact_up_to_gpus", type=BoundedInt(0, MAX_POOL_GPUS),
                     default=DEFAULTS.exact_up_to_gpus, show_default=True,
                     help="Pools of at most this many GPUs ignore --tier-ratio and --busy-instances (exact)."),
        click.option("--latency-spread", type=FiniteFloat(1, MAX_LATENCY_SPREAD), default=DEFAULTS.latency_spread,
                     show_default=True, help="p99/p50 of an estimated profile's batch latency where the "
                                             "variant's measurements do not say it (estimates are medians; "
                                             "measured and given profiles state their p99)."),
        click.option("--queueing/--no-queueing", default=DEFAULTS.queueing, show_default=True,
                     help="Count each segment's p99 queueing wait, with fan-out bulks, in stage latency "
                          "(a p99 bound under load; over-provisions at scale, see docs/planner.md)."),
        click.option("--routing", type=click.Choice([r.value for r in Routing]), default=DEFAULTS.routing.value,
                     show_default=True, callback=lambda _ctx, _param, value: Routing(value),
                     help="How requests reach a task's replicas, for --queueing's bulks: one-replica (a whole "
                          "bulk may land on any replica), per-request (in proportion to planned load: "
                          "tessera's frontend) or per-connection (a plain Service, --connections pinned)."),
        click.option("--connections", type=BoundedInt(1, MAX_CONNECTIONS), default=DEFAULTS.connections,
                     show_default=True, help="Client connections to each task's Service (--routing "
                                             "per-connection)."),
        click.option("--reconfigure-s", "reconfigure_s", type=FiniteFloat(0, MAX_TIME_LIMIT_S),
                     default=DEFAULTS.reconfigure_s, show_default=True,
                     help="Seconds mig-manager takes to re-partition a node (an estimate); 0 prices no change."),
        click.option("--change-horizon-s", "change_horizon_s", type=FiniteFloat(1, MAX_TIME_LIMIT_S),
                     default=DEFAULTS.change_horizon_s, show_default=True,
                     help="Seconds a plan is expected to stand: a changed node costs its capacity x "
                          "--reconfigure-s / this."),
        click.option("--max-nodes-changed", type=BoundedInt(0, MAX_POOL_GPUS), default=None,
                     help="The most serving nodes one re-plan may re-partition (default: no bound)."),
        click.option("--decompose/--joint-only", default=DEFAULTS.decompose, show_default=True,
                     help="On a fresh pool (no plan in force), plan each system alone, pack them together and "
                          "check the whole; on a re-plan, keep the parts of unchanged systems and plan the others "
                          "so; else the joint solve (docs/planner.md); --joint-only always solves the pool's "
                          "systems in one MILP."),
        click.option("--parallel-parts", type=click.IntRange(min=1, max=64), default=DEFAULTS.parallel_parts,
                     show_default=True,
                     help="Parts of a decomposed plan solved at once, by threads of the solving process (at most "
                          "its cores); the plan is the same for any value, 1 solves them one after another."),
        click.option("--slice-tolerance", type=FiniteFloat(0, COMPUTE_SLICES * MAX_POOL_GPUS, min_open=True),
                     default=DEFAULTS.slice_tolerance, show_default=True,
                     help="Slices the cost may stay above its proven bound (1: the fewest)."),
    ]

    def decorate(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command
    return decorate


PLANNER_PARAMETERS = ("levels", "headroom", "time_limit", "batches", "max_batch", "max_mps", "tier_ratio",
                      "busy_instances", "exact_up_to_gpus", "latency_spread", "queueing", "routing", "connections",
                      "slice_tolerance", "reconfigure_s", "change_horizon_s", "max_nodes_changed",
                      "decompose", "parallel_parts")


def take_planner_options(parameters: dict[str, Any]) -> PlannerOptions:
    """Takes the planner's options out of a command's parameters."""
    given = {name: parameters.pop(name) for name in PLANNER_PARAMETERS}
    return PlannerOptions(budget_levels=given.pop("levels"), time_limit_s=given.pop("time_limit"), **given)
