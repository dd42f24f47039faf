"""Let the twin decide at the edge: split servers the twin check fails, merge the weakest while it passes.

Maxpack packs every server to where the predictors put the edge of starvation,
which is where they are least sure (a full server predicted at 0.915 of offered
that an hour of the twin serves at 0.974; large low-rate pools the predictors
pass and the twin finds adapters under their bound). After the twin check of
tessera's placement:

1. **Split**: a server that fails its check is cut in two (zig-zag by rate, so
   hot and cold adapters share each half) and both halves are checked, down to
   ``MAX_SPLIT_DEPTH`` levels; a single adapter that fails alone stays failing
   and the placement is reported infeasible.
2. **Merge or empty**: the server with the least rate is merged into another
   (least rate first, ``MERGE_PARTNERS`` tried), or else emptied onto all the
   others (each adapter, hottest first, onto the least-loaded); a move is kept
   only when the twin passes every server it changed; repeated until none is.

Each try costs simulated hours for the servers it changes, and every kept
move removes a server, so both passes are bounded. The slots of a new server
are the predictors' best healthy count when they have one, else the slots its
adapters had (a merge keeps both servers' slots; a split half gets a slot per
adapter up to what memory starts). A server the gate creates must pass
``GATE_SEEDS`` hours, not one: at the edge one hour's verdict is a draw.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from .model import AdapterDemand, Placement, PlacementProblem, ServerPlacement
from .packing import describe, lora_rank_of, zigzag_order
from .server import ServerLoad, ServerModel
from .twin_check import ServerCase, check_server

MAX_SPLIT_DEPTH = 3
MERGE_PARTNERS = 2
GATE_SEEDS = 2  # hours (request-stream seeds) a server the gate creates must pass

Check = Callable[[ServerPlacement], ServerPlacement]


def _slots_for(model: ServerModel, adapters: Sequence[AdapterDemand], rank: int, known: int | None) -> int:
    """The predictors' best healthy slot count; where they see none, ``known`` (the slots these
    adapters had on the servers the twin passed), else a slot per adapter up to what memory starts."""
    best = model.best_slots(ServerLoad.of(adapters), rank)
    if best is not None:
        return best.max_loras
    cap = model.limits.max_lora_slots or len(adapters)
    if known is not None:
        return max(1, min(known, cap, len(adapters)))
    return max(1, min(len(adapters), cap, model.most_startable_slots(rank)))


def _server(model: ServerModel, adapters: Sequence[AdapterDemand], known: int | None = None) -> ServerPlacement:
    rank = lora_rank_of(adapters)
    return describe(model, 0, adapters, _slots_for(model, adapters, rank, known), rank)


def _passes(server: ServerPlacement) -> bool:
    return server.twin is not None and server.twin.passed


def _split(model: ServerModel, server: ServerPlacement, by_name: dict[str, AdapterDemand], check: Check,
           depth: int = 0) -> list[ServerPlacement]:
    if _passes(server) or len(server.adapters) < 2 or depth >= MAX_SPLIT_DEPTH:
        return [server]
    order = zigzag_order([by_name[n] for n in server.adapters])
    halves = [check(_server(model, half)) for half in (order[0::2], order[1::2])]
    return [piece for half in halves for piece in _split(model, half, by_name, check, depth + 1)]


def _merge_once(model: ServerModel, servers: list[ServerPlacement], by_name: dict[str, AdapterDemand],
                check: Check) -> list[ServerPlacement] | None:
    """The servers with the weakest merged into a partner the twin passes, or None when no merge passes."""
    by_rate = sorted(servers, key=lambda s: s.rate_rps)
    weakest, partners = by_rate[0], by_rate[1:1 + MERGE_PARTNERS]
    cap = model.limits.max_adapters_per_server
    for partner in partners:
        adapters = [by_name[n] for n in (*partner.adapters, *weakest.adapters)]
        if cap and len(adapters) > cap:
            continue
        merged = _server(model, adapters, partner.max_loras + weakest.max_loras)
        if not merged.starts:
            continue
        merged = check(merged)
        if _passes(merged):
            return [s for s in servers if s is not weakest and s is not partner] + [merged]
    return None


def _empty_once(model: ServerModel, servers: list[ServerPlacement], by_name: dict[str, AdapterDemand],
                check: Check) -> list[ServerPlacement] | None:
    """The servers with the weakest emptied onto the others (each of its adapters, hottest first, onto
    the least-loaded), or None unless the twin passes every server that received one."""
    by_rate = sorted(servers, key=lambda s: s.rate_rps)
    weakest, rest = by_rate[0], by_rate[1:]
    contents = [[by_name[n] for n in s.adapters] for s in rest]
    loads = [s.rate_rps for s in rest]
    received = [0] * len(rest)
    for adapter in sorted((by_name[n] for n in weakest.adapters), key=lambda a: (-a.rate_rps, a.name)):
        target = loads.index(min(loads))
        contents[target].append(adapter)
        loads[target] += adapter.rate_rps
        received[target] += 1
    cap = model.limits.max_adapters_per_server
    out = []
    for server, adapters, extra in zip(rest, contents, received):
        if not extra:
            out.append(server)
            continue
        # the slots go with the adapters: the receiver gets its share of the emptied server's
        grown = _server(model, adapters, server.max_loras + -(-weakest.max_loras * extra // len(weakest.adapters)))
        if (cap and len(adapters) > cap) or not grown.starts:
            return None
        grown = check(grown)
        if not _passes(grown):
            return None
        out.append(grown)
    return out


def twin_gate(placement: Placement, problem: PlacementProblem, model: ServerModel, seed: int = 0,
              progress: Callable[[int], None] | None = None) -> Placement:
    """tessera's twin-checked placement after the split and merge passes (servers renumbered)."""
    started = time.perf_counter()
    by_name = {a.name: a for a in problem.adapters}
    checks = 0

    def check(server: ServerPlacement) -> ServerPlacement:
        """The server with its worst of GATE_SEEDS hours: at the edge one hour's verdict is a draw
        (a merge one seed passed, another failed with an adapter at 0.83)."""
        nonlocal checks
        worst = None
        for _ in range(GATE_SEEDS):
            checks += 1
            case = ServerCase(model.profile, tuple(by_name[n] for n in server.adapters), server.max_loras,
                              server.max_lora_rank, problem.bound, seed + 1000 + checks)
            result = check_server(case)
            if progress:
                progress(1)
            if worst is None or (worst.passed, worst.min_served_fraction) > (result.passed, result.min_served_fraction):
                worst = result
            if not result.passed:
                break
        return replace(server, twin=worst)

    servers = [piece for s in placement.servers for piece in _split(model, s, by_name, check)]
    while len(servers) > 1:
        fewer = _merge_once(model, servers, by_name, check) or _empty_once(model, servers, by_name, check)
        if fewer is None:
            break
        servers = fewer
    limit = problem.limits.max_servers
    unplaced = placement.unplaced
    if limit is not None and len(servers) > limit:
        unplaced += tuple(n for s in servers[limit:] for n in s.adapters)
        servers = servers[:limit]
    ordered = sorted(servers, key=lambda s: -s.rate_rps)
    return replace(placement, servers=tuple(replace(s, index=i) for i, s in enumerate(ordered)), unplaced=unplaced,
                   twin_s=(placement.twin_s or 0.0) + time.perf_counter() - started)
