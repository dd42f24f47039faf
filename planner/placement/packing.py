"""Placement strategies, tessera's and the baselines', in one code path.

Each strategy is an order of the adapters and a rule for whether a server
takes one more adapter and with how many slots (--max-loras); every server,
whatever placed it, is then described by the same function (memory model,
predictors, per-adapter guard), so strategies differ only where they mean to.

- ``tessera`` (Maxpack): first-fit decreasing. Adapters by rank descending
  (a server's --max-lora-rank is set by its first adapter, rounded up to a
  value vLLM accepts, and smaller ranks fill the rest), within a rank by rate in zig-zag order (largest, smallest,
  next largest, ...: hot and cold adapters alternate, so no server collects
  only hot ones). A server takes an adapter while, with the fewest slots that
  work, it starts, the predictors call it unstarved, the guard holds, and its
  predicted throughput still rises. Each server then keeps the slot count with
  the highest predicted throughput.
- ``random``: the same fill rule on a random order (what the order buys).
- ``maxbase``: as many adapters per server as slots the memory model lets a
  server start with, A_max = that count: memory alone, blind to rates.
- ``maxbase*``: one adapter count k per server for the whole pool, every
  adapter in its own slot (A_max = k), k the largest for which no server is
  predicted starved (or cannot start): a starvation-safe A_max.
- ``dlora``: proactive load balancing in the style of dLoRA: for N servers,
  adapters by rate descending each to the least-loaded server; N the fewest
  for which every server is healthy with its best slot count.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from tessera.planner.twin.workload import server_max_lora_rank

from .model import AdapterDemand, PlacementProblem, ServerPlacement
from .server import ServerLoad, ServerModel, SlotChoice

STRATEGIES = ("tessera", "maxbase", "maxbase*", "dlora", "random")


def lora_rank_of(adapters: Sequence[AdapterDemand]) -> int:
    """--max-lora-rank of a server carrying these adapters: the smallest value vLLM accepts at or above every rank."""
    return server_max_lora_rank(max(a.rank for a in adapters))


def zigzag_order(adapters: Sequence[AdapterDemand]) -> list[AdapterDemand]:
    """Ranks descending; within a rank, rates largest, smallest, next largest, next smallest..."""
    ordered = sorted(adapters, key=lambda a: (-a.rank, -a.rate_rps, a.name))
    out: list[AdapterDemand] = []
    for _, group in groupby(ordered, key=lambda a: a.rank):
        same_rank = list(group)
        low, high = 0, len(same_rank) - 1
        while low <= high:
            out.append(same_rank[low])
            if low != high:
                out.append(same_rank[high])
            low, high = low + 1, high - 1
    return out


@dataclass
class OpenServer:
    """A server being filled: its adapters, aggregates, --max-lora-rank and slot choice."""

    adapters: list[AdapterDemand]
    load: ServerLoad
    max_lora_rank: int
    slots: int
    peak_throughput: float = 0.0  # the most any content of this server was predicted to serve
    rejected_rate: float = float("inf")  # least rate refused since the server last changed
    running: bool = False  # already serving (re-placement): its flags stay as they are
    index: int | None = None  # a running server's index

    def add(self, adapter: AdapterDemand, load: ServerLoad, choice: SlotChoice | None, slots: int) -> None:
        self.adapters.append(adapter)
        self.load = load
        self.max_lora_rank = max(self.max_lora_rank, lora_rank_of([adapter]))
        self.slots = choice.max_loras if choice else slots
        if choice:
            self.peak_throughput = max(self.peak_throughput, choice.prediction.throughput_tok_s)
        self.rejected_rate = float("inf")


Fill = Callable[[OpenServer, AdapterDemand], SlotChoice | None]

# The ratio tree is piecewise constant: one more cold adapter can cross into a leaf 0.5% lower,
# a "fall" in throughput that is the tree's resolution (its held-out error on healthy servers is
# 0.5%), not saturation. Throughput "rises" unless it falls below the server's peak by more.
RISE_TOLERANCE = 0.01


def throughput_rises(server: OpenServer, choice: SlotChoice) -> bool:
    return choice.prediction.throughput_tok_s >= server.peak_throughput * (1.0 - RISE_TOLERANCE)


def maxpack_fill(model: ServerModel) -> Fill:
    """Take the adapter while the server stays healthy and its predicted throughput rises."""
    cap = model.limits.max_adapters_per_server

    def fill(server: OpenServer, adapter: AdapterDemand) -> SlotChoice | None:
        # a server that refused a colder adapter since it last changed refuses a hotter one: skip the
        # predictor calls (the trees are not strictly monotone, so this can only lose a rare fit)
        if adapter.rate_rps >= server.rejected_rate or (cap and len(server.adapters) >= cap):
            return None
        load = server.load.plus(adapter)
        choice = model.fewest_slots(load, max(server.max_lora_rank, lora_rank_of([adapter])), at_least=server.slots)
        if choice is None or not throughput_rises(server, choice):
            server.rejected_rate = min(server.rejected_rate, adapter.rate_rps)
            return None
        return choice

    return fill


def first_fit(model: ServerModel, order: Sequence[AdapterDemand], fill: Fill,
              first_slots: Callable[[ServerLoad, int], SlotChoice | None],
              servers: list[OpenServer] | None = None) -> list[OpenServer]:
    """Each adapter onto the first server that takes it (``servers`` first), else onto a new one."""
    servers = list(servers or [])
    for adapter in order:
        for server in servers:
            choice = fill(server, adapter)
            if choice is not None:
                server.add(adapter, server.load.plus(adapter), choice, choice.max_loras)
                break
        else:
            load = ServerLoad().plus(adapter)
            rank = lora_rank_of([adapter])
            choice = first_slots(load, rank)
            # an adapter no server can carry alone still gets one, flagged unhealthy by describe()
            server = OpenServer([], ServerLoad(), rank, 1)
            server.add(adapter, load, choice, 1)
            servers.append(server)
    return servers


def describe(model: ServerModel, index: int, adapters: Sequence[AdapterDemand], max_loras: int,
             max_lora_rank: int) -> ServerPlacement:
    """The one description of a server every strategy's placement is judged by."""
    load = ServerLoad.of(adapters)
    starts = model.starts(max_loras, max_lora_rank)
    return ServerPlacement(
        index=index, adapters=tuple(a.name for a in adapters), max_loras=max_loras, max_lora_rank=max_lora_rank,
        rate_rps=load.rate_sum, starts=starts, predicted=model.predict(load, max_loras, max_lora_rank) if starts else None)


@dataclass(frozen=True)
class Filled:
    """One server as a strategy left it, before description."""

    adapters: list[AdapterDemand]
    max_loras: int
    max_lora_rank: int
    index: int | None = None  # kept by re-placement for servers that keep running


@dataclass
class Servers:
    """A strategy's result before description."""

    contents: list[Filled] = field(default_factory=list)

    def described(self, model: ServerModel) -> tuple[ServerPlacement, ...]:
        """Every server described the same way; new servers numbered after the kept ones."""
        next_index = max((f.index for f in self.contents if f.index is not None), default=-1) + 1
        out = []
        for filled in self.contents:
            index = filled.index
            if index is None:
                index, next_index = next_index, next_index + 1
            out.append(describe(model, index, filled.adapters, filled.max_loras, filled.max_lora_rank))
        return tuple(out)


def best_slots_of(model: ServerModel, servers: list[OpenServer]) -> Servers:
    """Each filled server with its highest-throughput healthy slot count (running servers keep theirs)."""
    out = Servers()
    for server in servers:
        best = None if server.running else model.best_slots(server.load, server.max_lora_rank)
        out.contents.append(Filled(server.adapters, best.max_loras if best else server.slots, server.max_lora_rank,
                                   server.index))
    return out


def maxpack(model: ServerModel, order: Sequence[AdapterDemand]) -> Servers:
    return best_slots_of(model, first_fit(model, order, maxpack_fill(model), model.fewest_slots))


def maxbase(model: ServerModel, order: Sequence[AdapterDemand]) -> Servers:
    out = Servers()
    for chunk in _chunks_by(order, lambda first: model.most_startable_slots(lora_rank_of([first]))):
        rank = lora_rank_of(chunk)
        out.contents.append(Filled(chunk, model.most_startable_slots(rank), rank))
    return out


def _chunks_by(order: Sequence[AdapterDemand], size_of: Callable[[AdapterDemand], int]) -> list[list[AdapterDemand]]:
    chunks: list[list[AdapterDemand]] = []
    start = 0
    while start < len(order):
        size = max(1, size_of(order[start]))
        chunks.append(list(order[start:start + size]))
        start += size
    return chunks


def _uniform(model: ServerModel, order: Sequence[AdapterDemand], count: int) -> tuple[Servers, bool]:
    out = Servers()
    healthy = True
    for chunk in _chunks_by(order, lambda _: count):
        rank = lora_rank_of(chunk)
        slots = len(chunk)
        out.contents.append(Filled(chunk, slots, rank))
        healthy = healthy and model.healthy(ServerLoad.of(chunk), slots, rank) is not None
    return out, healthy


def maxbase_star(model: ServerModel, order: Sequence[AdapterDemand]) -> Servers:
    """Largest uniform count k with no server predicted unhealthy (binary search: fewer adapters
    per server only lightens each one)."""
    low, high = 1, max(1, min(len(order), model.most_startable_slots(lora_rank_of(order[:1]))))
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if _uniform(model, order, mid)[1] else (low, mid - 1)
    return _uniform(model, order, low)[0]


def dlora(model: ServerModel, adapters: Sequence[AdapterDemand], start: int, most: int) -> Servers:
    by_rate = sorted(adapters, key=lambda a: (-a.rate_rps, a.name))
    last = Servers()
    # More servers than adapters leave some empty: the lower bound of a pool of a few very hot adapters
    # (4e8 servers for 2000 adapters at 1e7 req/s) would otherwise be a heap of that size.
    start, most = min(start, len(adapters)), min(most, len(adapters))
    for n_servers in range(max(1, start), max(start, most) + 1):
        heap = [(0.0, i) for i in range(n_servers)]
        groups: list[list[AdapterDemand]] = [[] for _ in range(n_servers)]
        for adapter in by_rate:
            rate, i = heapq.heappop(heap)
            groups[i].append(adapter)
            heapq.heappush(heap, (rate + adapter.rate_rps, i))
        last, healthy = Servers(), True
        for group in filter(None, groups):
            rank = lora_rank_of(group)
            best = model.best_slots(ServerLoad.of(group), rank)
            healthy = healthy and best is not None
            slots = best.max_loras if best else max(1, min(len(group), model.most_startable_slots(rank)))
            last.contents.append(Filled(group, slots, rank))
        if healthy:
            break
    return last


def run_strategy(strategy: str, model: ServerModel, problem: PlacementProblem, lower_bound: int,
                 seed: int = 0) -> Servers:
    adapters = problem.adapters
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if not adapters:
        return Servers()
    if strategy == "tessera":
        return maxpack(model, zigzag_order(adapters))
    if strategy == "random":
        order = list(adapters)
        random.Random(seed).shuffle(order)
        return maxpack(model, order)
    if strategy == "maxbase":
        return maxbase(model, zigzag_order(adapters))
    if strategy == "maxbase*":
        return maxbase_star(model, zigzag_order(adapters))
    if strategy == "dlora":
        return dlora(model, adapters, lower_bound, problem.limits.max_servers or len(adapters))
    raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
