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
2. **Merge**: the server with the least rate is merged into another (least
   rate first, ``MERGE_PARTNERS`` tried) and the merge is kept only when the
   twin passes the merged server; repeated until no merge passes.

Each move costs one simulated hour per server it creates, so both passes are
bounded. The slots of a new server are the predictors' best healthy count when
they have one, else every adapter its own slot up to what memory starts with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from .model import AdapterDemand, Placement, PlacementProblem, ServerPlacement
from .packing import describe, zigzag_order
from .server import ServerLoad, ServerModel
from .twin_check import ServerCase, check_server

MAX_SPLIT_DEPTH = 3
MERGE_PARTNERS = 2

Check = Callable[[ServerPlacement], ServerPlacement]


def _slots_for(model: ServerModel, adapters: Sequence[AdapterDemand], rank: int) -> int:
    best = model.best_slots(ServerLoad.of(adapters), rank)
    if best is not None:
        return best.max_loras
    cap = model.limits.max_lora_slots or len(adapters)
    return max(1, min(len(adapters), cap, model.most_startable_slots(rank)))


def _server(model: ServerModel, adapters: Sequence[AdapterDemand]) -> ServerPlacement:
    rank = max(a.rank for a in adapters)
    return describe(model, 0, adapters, _slots_for(model, adapters, rank), rank)


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
        merged = _server(model, adapters)
        if not merged.starts:
            continue
        merged = check(merged)
        if _passes(merged):
            return [s for s in servers if s is not weakest and s is not partner] + [merged]
    return None


def twin_gate(placement: Placement, problem: PlacementProblem, model: ServerModel, seed: int = 0,
              progress: Callable[[int], None] | None = None) -> Placement:
    """tessera's twin-checked placement after the split and merge passes (servers renumbered)."""
    started = time.perf_counter()
    by_name = {a.name: a for a in problem.adapters}
    checks = 0

    def check(server: ServerPlacement) -> ServerPlacement:
        nonlocal checks
        checks += 1
        case = ServerCase(model.profile, tuple(by_name[n] for n in server.adapters), server.max_loras,
                          server.max_lora_rank, problem.bound, seed + 1000 + checks)
        result = check_server(case)
        if progress:
            progress(1)
        return replace(server, twin=result)

    servers = [piece for s in placement.servers for piece in _split(model, s, by_name, check)]
    while len(servers) > 1:
        merged = _merge_once(model, servers, by_name, check)
        if merged is None:
            break
        servers = merged
    limit = problem.limits.max_servers
    unplaced = placement.unplaced
    if limit is not None and len(servers) > limit:
        unplaced += tuple(n for s in servers[limit:] for n in s.adapters)
        servers = servers[:limit]
    ordered = sorted(servers, key=lambda s: -s.rate_rps)
    return replace(placement, servers=tuple(replace(s, index=i) for i, s in enumerate(ordered)), unplaced=unplaced,
                   twin_s=(placement.twin_s or 0.0) + time.perf_counter() - started)
