"""Re-placement: new rates or a new adapter list, as few adapters moved as possible.

A server keeps its adapters while, with its current --max-loras and
--max-lora-rank, it stays healthy (starts, unstarved, guard). Changing either
flag restarts the vLLM process, which drops every adapter it serves, so it
counts as moving all of them. A server that is no longer healthy sheds its
hottest adapters one at a time (each move takes the most load off) until it is;
if it would have to shed all of them, it restarts with the fewest slots that
work instead where that keeps them. Shed and new adapters are then placed by
tessera's order into the servers that keep running (at their flags) and,
where none takes them, onto new servers. Removed adapters are dropped. Servers
are not consolidated when rates fall: that would move adapters to save a GPU,
which is a different trade.
"""

from __future__ import annotations

import time

from .model import AdapterDemand, Placement, PlacementProblem, Replacement
from .packing import (Fill, OpenServer, best_slots_of, first_fit, lora_rank_of, maxpack_fill, throughput_rises,
                      zigzag_order)
from .server import ServerLoad, ServerModel, SlotChoice


def _shed_until_healthy(model: ServerModel, adapters: list[AdapterDemand], slots: int, rank: int
                        ) -> tuple[list[AdapterDemand], list[AdapterDemand]]:
    """(kept, shed): the hottest adapters shed one at a time until the rest is healthy at these flags."""
    kept = sorted((a for a in adapters if a.rank <= rank), key=lambda a: (-a.rate_rps, a.name))
    shed = [a for a in adapters if a.rank > rank]
    while kept and model.healthy(ServerLoad.of(kept), slots, rank) is None:
        shed.append(kept.pop(0))
    return kept, shed


def _running_fill(model: ServerModel) -> Fill:
    """Fill a running server without touching its flags; new servers fill as in tessera's placement."""
    maxpack = maxpack_fill(model)

    def fill(server: OpenServer, adapter: AdapterDemand) -> SlotChoice | None:
        if not server.running:
            return maxpack(server, adapter)
        if adapter.rank > server.max_lora_rank:
            return None
        cap = model.limits.max_adapters_per_server
        if cap and len(server.adapters) >= cap:
            return None
        prediction = model.healthy(server.load.plus(adapter), server.slots, server.max_lora_rank)
        choice = None if prediction is None else SlotChoice(server.slots, prediction)
        return choice if choice is not None and throughput_rises(server, choice) else None

    return fill


def replace_adapters(problem: PlacementProblem, previous: Placement, model: ServerModel | None = None) -> Replacement:
    started = time.perf_counter()
    model = model or ServerModel(problem)
    by_name = {a.name: a for a in problem.adapters}
    before = {name for s in previous.servers for name in s.adapters}
    moved: list[str] = []
    restarted: list[int] = []
    servers: list[OpenServer] = []
    homeless: list[AdapterDemand] = []
    for old in previous.servers:
        adapters = [by_name[n] for n in old.adapters if n in by_name]
        if not adapters:
            continue
        kept, shed = _shed_until_healthy(model, adapters, old.max_loras, old.max_lora_rank)
        if not kept:
            restart = model.fewest_slots(ServerLoad.of(adapters), lora_rank_of(adapters))
            if restart is not None:
                restarted.append(old.index)
                moved += [a.name for a in adapters]
                kept, shed = adapters, []
                servers.append(_running(model, kept, restart.max_loras, lora_rank_of(adapters), old.index))
                continue
        moved += [a.name for a in shed]
        homeless += shed
        if kept:
            servers.append(_running(model, kept, old.max_loras, old.max_lora_rank, old.index))
    homeless += [a for a in problem.adapters if a.name not in before]
    filled = best_slots_of(model, first_fit(model, zigzag_order(homeless), _running_fill(model), model.fewest_slots,
                                            servers))
    placement = Placement(
        strategy="tessera (re-placed)", model=model.profile.model,
        servers=filled.described(model),
        place_s=time.perf_counter() - started)
    return Replacement(placement=placement, moved=tuple(moved), restarted=tuple(restarted),
                       added=tuple(a.name for a in problem.adapters if a.name not in before),
                       removed=tuple(sorted(before - set(by_name))))


def _running(model: ServerModel, adapters: list[AdapterDemand], slots: int, rank: int, index: int) -> OpenServer:
    load = ServerLoad.of(adapters)
    prediction = model.healthy(load, slots, rank)
    return OpenServer(list(adapters), load, rank, slots, prediction.throughput_tok_s if prediction else 0.0,
                      running=True, index=index)
