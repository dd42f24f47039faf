"""Plain data of adapter placement: the problem that goes in, the placement that comes out.

Independent of the AdapterPool API on purpose (``from_spec`` converts): the
placement library, its benchmarks and its tests speak only these shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tessera.planner.twin.sim import STARVATION_RATIO

# By default an adapter is owed what the starvation rule owes a server: that share of its requests served.
DEFAULT_MIN_SERVED_FRACTION = STARVATION_RATIO
# A server that keeps up with its traffic serves about 0.975 of the offered tokens in the hour (early
# stops end requests before max_tokens; the last seconds' arrivals are in flight). Below KEEPS_UP_RATIO
# a backlog builds, and under the adapter rule the cold adapters wait longest: the twin put a server of
# 165 Zipf-rated adapters at 28.8 req/s (A_max 64) at 0.954 of offered, unstarved, with 9 cold
# adapters served below 0.9. Placement fills a server only while it keeps up.
KEEPS_UP_RATIO = 0.96
# ...and the trees are least sure near capacity: a Llama server of 394 rank-8 adapters at 19.2 req/s
# was predicted at 0.961 and ran at 0.948 in the twin (six cold adapters under 0.9, p99 TTFT 270 s),
# its offered rate 0.99 of what its largest batch serves (the predictors' ``overload`` feature). So a
# server also keeps 10% headroom there, as compound-system plans keep 10% over demand.
MOST_OVERLOAD = 1.0 / 1.1
# The per-adapter guard's limits (the reasons are in server.py's docstring).
MOST_BUSY_PER_SLOT = 1.0
MOST_CYCLE_S = 60.0


@dataclass(frozen=True)
class AdapterDemand:
    """One LoRA adapter to place: its name, rank and expected requests/s."""

    name: str
    rank: int
    rate_rps: float


@dataclass(frozen=True)
class ServiceBound:
    """What each adapter is owed, judged by the twin check on every adapter of a server.

    ``min_served_fraction``: of each adapter's requests that arrived before the last
    ``SERVED_GRACE_S`` of the simulated hour, the share finished within the hour.
    ``p99_ttft_ms``: each adapter's p99 time to first token over the same requests."""

    min_served_fraction: float | None = DEFAULT_MIN_SERVED_FRACTION
    p99_ttft_ms: float | None = None


@dataclass(frozen=True)
class PoolLimits:
    """Caps placement respects: servers, adapters per server, slots (--max-loras) per server."""

    max_servers: int | None = None
    max_adapters_per_server: int | None = None
    max_lora_slots: int | None = None


@dataclass(frozen=True)
class PlacementProblem:
    """Adapters of one base model on servers of one GPU product, one server per GPU."""

    adapters: tuple[AdapterDemand, ...]
    model: str  # twin profile: qwen2.5-7b-instruct, llama-3.1-8b-instruct (or an alias, or a YAML path)
    bound: ServiceBound = field(default_factory=ServiceBound)
    limits: PoolLimits = field(default_factory=PoolLimits)
    max_model_len: int | None = None  # overrides the profile's; longer leaves fewer slots startable
    name: str = "pool"
    gpu: str | None = None  # the pool's GPU product, compared with the twin profile's


@dataclass(frozen=True)
class Prediction:
    """What the compiled predictors say about one server (microseconds per call)."""

    ratio: float  # throughput / offered over one hour
    starved: bool  # ratio < 0.9 by the starvation classifier
    offered_tok_s: float
    busy_per_slot: float  # adapters with a request within the busy window, per slot (the per-adapter guard)
    overload: float  # offered req/s over what the largest batch serves (the step-time model)
    cycle_s: float  # the adapter rule's polling cycle: adapters x request latency / slots
    slot_per_adapter: bool  # every adapter has its own slot: the adapter rule never makes one wait

    @property
    def throughput_tok_s(self) -> float:
        return self.ratio * self.offered_tok_s

    @property
    def keeps_up(self) -> bool:
        return not self.starved and self.ratio >= KEEPS_UP_RATIO and self.overload <= MOST_OVERLOAD

    @property
    def guard_ok(self) -> bool:
        """Every adapter's own service, as far as the predictors' features show it (see server.py)."""
        return self.slot_per_adapter or (self.busy_per_slot <= MOST_BUSY_PER_SLOT and self.cycle_s <= MOST_CYCLE_S)

    @property
    def healthy(self) -> bool:
        return self.keeps_up and self.guard_ok


@dataclass(frozen=True)
class TwinCheck:
    """One simulated hour of one server under the predictors' training conditions."""

    starts: bool
    ratio: float = 0.0
    starved: bool = False
    throughput_tok_s: float = 0.0
    offered_tok_s: float = 0.0
    min_served_fraction: float = 0.0  # the worst adapter's, over requests before the grace window
    adapters_under_bound: tuple[str, ...] = ()  # served below the bound's fraction
    ttft_p99_ms: float = float("nan")  # the worst adapter's p99 time to first token
    adapters_over_ttft: tuple[str, ...] = ()  # p99 time to first token above the bound
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.starts and not self.starved and not self.adapters_under_bound and not self.adapters_over_ttft


@dataclass(frozen=True)
class ServerPlacement:
    """One server (one GPU, one vLLM process): its adapters and the two flags that restart it."""

    index: int
    adapters: tuple[str, ...]
    max_loras: int
    max_lora_rank: int
    rate_rps: float
    starts: bool  # by the memory model
    predicted: Prediction | None  # None where the server cannot start
    twin: TwinCheck | None = None

    @property
    def predicted_ok(self) -> bool:
        return self.starts and self.predicted is not None and self.predicted.healthy

    @property
    def disagrees(self) -> bool:
        """Twin and predictors disagree: one calls the server healthy, the other does not."""
        return self.twin is not None and self.twin.passed != self.predicted_ok


@dataclass(frozen=True)
class Placement:
    """Servers of one strategy (tessera's or a baseline's) for one problem."""

    strategy: str
    model: str
    servers: tuple[ServerPlacement, ...]
    unplaced: tuple[str, ...] = ()  # adapters beyond the pool's server limit
    place_s: float = 0.0
    twin_s: float | None = None  # None: not twin-checked

    @property
    def servers_used(self) -> int:
        return len(self.servers)

    @property
    def predicted_ok(self) -> bool:
        return not self.unplaced and all(s.predicted_ok for s in self.servers)

    @property
    def twin_checked(self) -> bool:
        return self.twin_s is not None

    @property
    def twin_ok(self) -> bool:
        return self.twin_checked and not self.unplaced and all(s.twin is not None and s.twin.passed
                                                               for s in self.servers)

    def count(self, flag: Callable[[ServerPlacement], bool]) -> int:
        return sum(1 for s in self.servers if flag(s))


@dataclass(frozen=True)
class LowerBound:
    """Fewest servers any placement can use, and why."""

    servers: int
    capacity_rps: float  # most req/s one server can carry unstarved
    argument: str


@dataclass(frozen=True)
class Replacement:
    """A re-placement and what it costs the running servers."""

    placement: Placement
    moved: tuple[str, ...]  # adapters now on another server or on a restarted one
    restarted: tuple[int, ...]  # previous server indices whose flags changed
    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def moves(self) -> int:
        return len(self.moved)


@dataclass(frozen=True)
class GateLog:
    """What the twin gate spent and did (planner/placement/twin_gate.py)."""

    hours: int  # simulated hours run
    confirm_hours: int  # of them, confirming the placement's servers (GATE_SEEDS - 1 each)
    max_hours: int  # the gate's bound on the others (splits and moves)
    hours_ran_out: bool  # a check was not run for want of hours: a move not kept, or a split not made
    splits: int  # servers cut in two
    moves_tried: int  # merges and emptyings tried
    moves_kept: int  # each one server fewer
    wall_s: float


@dataclass(frozen=True)
class PlacementReport:
    """tessera's placement beside the baselines and the lower bound."""

    problem_name: str
    model: str
    adapters: int
    rate_rps: float
    placement: Placement
    baselines: tuple[Placement, ...]
    lower_bound: LowerBound
    notes: tuple[str, ...] = ()
    replacement: Replacement | None = None  # when placed against a previous placement
    gate: GateLog | None = None  # when the twin gate ran
