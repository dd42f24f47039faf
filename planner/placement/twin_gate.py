"""Let the twin decide at the edge: split servers the twin check fails, merge or empty the weakest while it passes.

Maxpack packs every server to where the predictors put the edge of starvation,
which is where they are least sure (a 64-adapter server they call unhealthy that
an hour of the twin serves at 0.97, every adapter >= 0.99; large pools they
pass where the twin finds adapters under their bound). After the twin check of
tessera's placement:

1. **Confirm**: a server the placement's one hour passed is held to what the
   gate asks of the servers it makes, ``GATE_SEEDS`` hours in all: at the edge
   one hour's verdict is a draw (a 256-adapter server passed 5 of 8 hours).
2. **Split**: a server that fails is cut in two (zig-zag by rate, so hot and
   cold adapters share each half) and both halves are checked, down to
   ``MAX_SPLIT_DEPTH`` levels; a single adapter that fails alone stays failing
   and the placement is reported infeasible.
3. **Consolidate**: the weakest server (least rate, then fewest adapters) is
   merged into another (least rate first, ``MERGE_PARTNERS`` tried), or else
   emptied onto the ``EMPTY_RECEIVERS`` least-loaded others (each adapter,
   hottest first, onto the least-loaded); a move is kept only when the twin
   passes every server it changed, every adapter at its service bound, for
   ``GATE_SEEDS`` hours; repeated until a round keeps no move.

A server the gate makes has the predictors' best healthy slot count
(--max-loras) when they have one, else the slots its adapters had (a merge
keeps both servers' slots), else a slot per adapter up to what memory starts.

Bounded: the confirmation costs ``GATE_SEEDS - 1`` simulated hours a server;
splits and moves at most ``max_hours`` more (``GATE_HOURS`` by default); an
hour takes about 0.3-1 s on one core. A check past ``max_hours`` is not run and
the move it belonged to is not kept (a server whose split it cuts stays
failing). Deterministic: every hour's request stream has a fixed seed
(``seed``, then one more per hour simulated).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .model import AdapterDemand, GateLog, Placement, PlacementProblem, ServerPlacement, TwinCheck
from .packing import describe, lora_rank_of, zigzag_order
from .server import ServerLoad, ServerModel
from .twin_check import CHECK_HOUR_S, ServerCase, check_placement, check_server

MAX_SPLIT_DEPTH = 3
MERGE_PARTNERS = 2
EMPTY_RECEIVERS = 4
GATE_SEEDS = 2  # hours (request-stream seeds) every server the gate keeps has passed
GATE_HOURS = 64
SEED_OFFSET = 1000  # the gate's streams differ from the twin check's (seed + server index)
CONFIRM_SEED = 1_000_003  # and a confirming hour's (seed + this + server index) from both


@dataclass
class _Gate:
    """One run of the gate: the pool, the twin's seeds and the hours spent."""

    model: ServerModel
    problem: PlacementProblem
    seed: int
    max_hours: int
    hour_s: float
    progress: Callable[[int], None] | None
    hours: int = 0  # spent on splits and moves, at most max_hours
    seeds: int = 0
    cut: bool = False  # a check was not run: the hours were spent
    splits: int = 0
    moves_tried: int = 0
    moves_kept: int = 0

    def __post_init__(self) -> None:
        self.by_name = {a.name: a for a in self.problem.adapters}

    def adapters(self, *servers: ServerPlacement) -> list[AdapterDemand]:
        return [self.by_name[n] for s in servers for n in s.adapters]

    # ---- the twin ----
    def hour(self, server: ServerPlacement) -> TwinCheck:
        """One more simulated hour of the server, on a stream of its own."""
        self.seeds += 1
        case = ServerCase(self.model.profile, tuple(self.adapters(server)), server.max_loras, server.max_lora_rank,
                          self.problem.bound, self.seed + SEED_OFFSET + self.seeds, self.hour_s)
        result = check_server(case)
        if self.progress:
            self.progress(1)
        return result

    def check(self, server: ServerPlacement) -> ServerPlacement | None:
        """The server with its worst of GATE_SEEDS hours (a merge one seed passed, another failed with an
        adapter at 0.83), stopping at the first failing hour; None when the hours left do not cover it."""
        worst = None
        for _ in range(GATE_SEEDS):
            if self.hours >= self.max_hours:
                self.cut = True
                return None
            self.hours += 1
            result = self.hour(server)
            if worst is None or (worst.passed, worst.min_served_fraction) > (result.passed, result.min_served_fraction):
                worst = result
            if not result.passed:
                break
        return replace(server, twin=worst)

    def slots_for(self, adapters: Sequence[AdapterDemand], rank: int, known: int | None) -> int:
        """The predictors' best healthy slot count; where they see none, ``known`` (the slots these
        adapters had on the servers the twin passed), else a slot per adapter up to what memory starts.
        (Trying the predictors' next best count too changed no outcome on 9 pools at the edge and
        cost up to 3 more hours each: bench/README.md.)"""
        best = self.model.best_slots(ServerLoad.of(adapters), rank)
        if best is not None:
            return best.max_loras
        cap = self.model.limits.max_lora_slots or len(adapters)
        if known is not None:
            return max(1, min(known, cap, len(adapters)))
        return max(1, min(len(adapters), cap, self.model.most_startable_slots(rank)))

    def judged(self, adapters: Sequence[AdapterDemand], known: int | None = None) -> ServerPlacement | None:
        """A server of these adapters, checked by the twin; None when it was not checked (no hours
        left), cannot start or holds more adapters than the pool allows."""
        cap = self.model.limits.max_adapters_per_server
        if not adapters or (cap and len(adapters) > cap):
            return None
        rank = lora_rank_of(adapters)
        server = describe(self.model, 0, adapters, self.slots_for(adapters, rank, known), rank)
        return self.check(server) if server.starts else None

    # ---- the passes ----
    def split(self, server: ServerPlacement, depth: int = 0) -> list[ServerPlacement]:
        if _passing(server) or len(server.adapters) < 2 or depth >= MAX_SPLIT_DEPTH:
            return [server]
        order = zigzag_order(self.adapters(server))
        halves = [self.judged(half) for half in (order[0::2], order[1::2])]
        if any(h is None for h in halves):
            return [server]  # the hours ran out (or a half cannot start): it stays as it was, failing
        self.splits += 1
        return [piece for half in halves if half is not None for piece in self.split(half, depth + 1)]

    def merge_once(self, servers: list[ServerPlacement]) -> list[ServerPlacement] | None:
        """The servers with the weakest merged into a partner the twin passes, or None when no merge passes."""
        weakest, *others = _weakest_first(servers)
        for partner in others[:MERGE_PARTNERS]:
            self.moves_tried += 1
            merged = _passing(self.judged(self.adapters(partner, weakest), partner.max_loras + weakest.max_loras))
            if merged is not None:
                return [s for s in servers if s is not weakest and s is not partner] + [merged]
        return None

    def empty_once(self, servers: list[ServerPlacement]) -> list[ServerPlacement] | None:
        """The servers with the weakest emptied onto the least-loaded others (each of its adapters, hottest
        first, onto the least-loaded), or None unless the twin passes every server that received one."""
        weakest, *others = _weakest_first(servers)
        receivers = others[:EMPTY_RECEIVERS]
        contents = [self.adapters(s) for s in receivers]
        loads = [s.rate_rps for s in receivers]
        received = [0] * len(receivers)
        for adapter in sorted(self.adapters(weakest), key=lambda a: (-a.rate_rps, a.name)):
            target = loads.index(min(loads))
            contents[target].append(adapter)
            loads[target] += adapter.rate_rps
            received[target] += 1
        self.moves_tried += 1
        grown_servers = []
        for server, adapters, extra in zip(receivers, contents, received):
            if not extra:
                grown_servers.append(server)
                continue
            # the slots go with the adapters: the receiver gets its share of the emptied server's
            grown = _passing(self.judged(adapters, server.max_loras
                                         + -(-weakest.max_loras * extra // len(weakest.adapters))))
            if grown is None:
                return None
            grown_servers.append(grown)
        return [s for s in servers if s is not weakest and all(s is not r for r in receivers)] + grown_servers

    def consolidate(self, servers: list[ServerPlacement]) -> list[ServerPlacement]:
        """The servers the twin passes, merged or emptied while a move passes; those it fails stay
        apart (a server the split could not fix only fails more with more on it)."""
        passing = [s for s in servers if _passing(s)]
        while len(passing) > 1 and self.hours < self.max_hours:
            fewer = self.merge_once(passing) or self.empty_once(passing)
            if fewer is None:
                break
            self.moves_kept += 1
            passing = fewer
        return passing + [s for s in servers if not _passing(s)]


def _passing(server: ServerPlacement | None) -> ServerPlacement | None:
    """The server when the twin passed it, else None."""
    return server if server is not None and server.twin is not None and server.twin.passed else None


def _weakest_first(servers: Sequence[ServerPlacement]) -> list[ServerPlacement]:
    return sorted(servers, key=lambda s: (s.rate_rps, len(s.adapters), s.index))


def _confirmed(placement: Placement, problem: PlacementProblem, model: ServerModel, seed: int, workers: int,
               progress: Callable[[int], None] | None, hour_s: float) -> tuple[list[ServerPlacement], int]:
    """The placement's servers, each its one hour passed held to what the gate asks of the servers it
    makes: GATE_SEEDS hours in all (a 256-adapter server at the edge passed 5 of 8 hours), run in
    parallel; a server's first failing hour is its verdict. Also the hours run."""
    servers, hours = list(placement.servers), 0
    for extra in range(1, GATE_SEEDS):
        passing = replace(placement, servers=tuple(s for s in servers if _passing(s)))
        again = check_placement(passing, problem.adapters, model.profile, problem.bound,
                                seed + CONFIRM_SEED * extra, workers, progress, hour_s)
        hours += again.servers_used
        failed = {s.index: s.twin for s in again.servers if not _passing(s)}
        servers = [replace(s, twin=failed[s.index]) if s.index in failed else s for s in servers]
    return servers, hours


def twin_gate(placement: Placement, problem: PlacementProblem, model: ServerModel, seed: int = 0,
              progress: Callable[[int], None] | None = None, max_hours: int = GATE_HOURS,
              hour_s: float = CHECK_HOUR_S, workers: int = 1) -> tuple[Placement, GateLog]:
    """tessera's twin-checked placement after the confirm, split and consolidation passes (servers
    renumbered, hottest first), and what the gate spent. ``progress(1)`` after each simulated hour;
    ``workers`` processes run the confirming hours."""
    started = time.perf_counter()
    confirmed, confirm_hours = _confirmed(placement, problem, model, seed, workers, progress, hour_s)
    gate = _Gate(model, problem, seed, max_hours, hour_s, progress)
    servers = [piece for s in confirmed for piece in gate.split(s)]
    servers = gate.consolidate(servers)
    limit = problem.limits.max_servers
    unplaced = placement.unplaced
    if limit is not None and len(servers) > limit:
        unplaced += tuple(n for s in servers[limit:] for n in s.adapters)
        servers = servers[:limit]
    ordered = sorted(servers, key=lambda s: -s.rate_rps)
    wall_s = time.perf_counter() - started
    gated = replace(placement, servers=tuple(replace(s, index=i) for i, s in enumerate(ordered)), unplaced=unplaced,
                    twin_s=(placement.twin_s or 0.0) + wall_s)
    return gated, GateLog(hours=gate.hours + confirm_hours, confirm_hours=confirm_hours,
                          max_hours=max_hours, hours_ran_out=gate.cut, splits=gate.splits,
                          moves_tried=gate.moves_tried, moves_kept=gate.moves_kept, wall_s=wall_s)
