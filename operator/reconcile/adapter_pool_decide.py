"""Decide, for AdapterPools: their GPUs, their vLLM servers and their status, from what a reconcile read.

Pure, like decide.py: plain data in (the pools' objects, the GPU pool, the
compound plan's GPUs, tessera's children, the placement), plain actions out.
The rules (docs/operator.md, "AdapterPools"):

- An AdapterPool's servers are planned before the compound systems of the
  same GPU pool, each on one whole GPU (MIG off), and those GPUs are given to
  the compound solve as reserved: the adapter placement is a fast packing
  that needs whole GPUs, the compound solve already plans around reserved
  GPUs (an invalid system's last good share), so the two never claim one GPU.
- One priority order over both kinds (docs/operator.md, "Priorities across
  AdapterPools and compound systems"): an AdapterPool of spec.poolPriority p
  never takes a GPU the compound plan in force holds for a system of
  priority p or higher (`outranking`; at equal priority what already runs
  keeps it), and may claim one held only by lower priorities (reserved
  against the next solve, its server waiting until the plan in force leaves
  it). Where a compound system of the pool outranks it (`yields_to_compound`)
  its GPUs are not reserved but lent only to systems above its priority
  (the planner's NodeState.usable_above): those may take them, no system of
  its priority or lower can, and it is placed on what that plan leaves,
  Degraded PreemptedByPriority naming who took them.
- A server keeps its GPU across reconciles (read back from its Deployment's
  annotation); new servers take free GPUs that no compound plan holds first,
  from the pool's last GPU backwards, so adapter servers fill nodes from one
  end and leave whole nodes to the compound systems' MIG layouts.
- A server whose GPU the compound plan in force still holds (its re-plan
  failed or has not run), or whose node is being re-partitioned, or whose
  pool's first compound plan is being solved, waits: at no time do both
  kinds claim one GPU.
- Adapters beyond the GPUs free for them are unplaced: Degraded says how
  much of the pool's rate the placed ones carry.
- A namespace's ResourceQuota on `requests.nvidia.com/gpu` caps its
  AdapterPools' servers together (quotas.py): each takes at most what the
  quota leaves after the namespace's pools placed before it; Degraded
  QuotaReached names the quota where it, not the free GPUs, leaves adapters
  unplaced.
- AdapterPools take the free GPUs in turn: invalid ones first (their
  running servers keep their GPUs), then by spec.poolPriority, highest
  first, then by name.
- Adapters that failed to load repeatedly (adapter_loading.py) make the pool
  Degraded AdapterLoadFailed, naming them with the engine's error.
- A changed spec is re-placed against the placement in force (`replace_adapters`:
  as few adapters moved as possible), read back from the cluster each
  reconcile (each server's adapters from the pool's placement ConfigMap, its
  flags from its Deployment), so it holds after a restart or a leader change;
  without a readable record it is placed afresh. A re-placement that
  needs more than REPLACEMENT_SLACK servers beyond a fresh placement, or
  leaves more adapters unplaced, gives way to the fresh placement: few moves,
  but not an ever-growing fleet (re-placement never consolidates).
- A server that keeps its --max-loras and --max-lora-rank keeps its
  Deployment's pod template, --max-cpu-loras included: no restart.
- A pool with a demandSource is placed for the rates adapter_pool_demand.py
  decides from its readings (hysteresis, Unknown kept), recorded beside the
  adapters in its placement ConfigMap; rates within the hysteresis leave the
  problem, so the placement, as they were: no move, no write.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.adapter_pools import PLURAL, AdapterPoolObject, PoolRef
from tessera.operator.api.v1alpha1 import (AdapterPlacementSummary, ReplacementSummary, RouteNames, ServerSummary,
                                           child_name)
from tessera.operator.gpus.discovery import HOSTNAME_LABEL, WHOLE_GPU_RESOURCE, Pool
from tessera.operator.gpus.node_plans import NodePlan
from tessera.operator.gpus.node_plans import Placement as NodePlacement
from tessera.operator.gpus.node_plans import Share, placed_gpus
from tessera.operator.pod_security import RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY
from tessera.operator.reconcile.actions import Action, ApplyChild, DeleteChild, Json, PatchStatus, PostEvent
from tessera.operator.reconcile.adapter_pool_demand import RatesDecision, rates_record, recorded_rates
from tessera.operator.reconcile.adapter_weights import (base_model_path, fetch_containers, running_fetcher_image,
                                                       server_mounts, weights_volumes)
from tessera.operator.reconcile.builders import SERVER_CONTAINER, applied_hash, disruption_budget, with_applied_hash
# the one rule for an available server Deployment, the compound systems' servers' too
from tessera.operator.reconcile.decide import BUDGET, NodeMig, stored_pool_plan
from tessera.operator.reconcile.decide import node_mig as layout_of_node
from tessera.operator.reconcile.decide import _available as available
from tessera.operator.reconcile.quotas import WholeGpuQuota
from tessera.operator.settings import OperatorSettings
from tessera.planner.adapter_pool import AdapterPoolSpec
from tessera.planner.placement import Placement, PlacementProblem, ServerPlacement, place, replace_adapters
from tessera.planner.placement.model import AdapterDemand

Slot = tuple[str, int]
"""(node, GPU index on the node): one whole GPU."""
SERVER_COMPONENT = "adapter-server"
GPU_ANNOTATION = f"{naming.GROUP}/gpu"
"""On a server's Deployment: `node/index` of its GPU, read back so the server keeps it."""
SERVER_ANNOTATION = f"{naming.GROUP}/adapter-server"
"""On a server's Deployment: the server's index in the placement."""
PLACEMENT_COMPONENT = "adapter-placement"
PLACEMENT_KEY = "placement.json"
"""The placement ConfigMap's one key: each server's index, Deployment, flags and adapters (sorted), as JSON; read back
for the next re-placement. Not on the Deployments: the API server counts a changed annotation of a Deployment as a
new generation. 2,000 adapters of 63 characters take 140-170 kB (13 to 256 servers) of a ConfigMap's 1 MiB."""
RATES_KEY = "rates.json"
"""A pool with a demandSource: the rate each adapter was placed for (adapter -> requests/s), read back as the
hysteresis' reference (about 100 kB more for 2,000 adapters of 63 characters)."""
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
REPLACEMENT_SLACK = 0.1
"""A re-placement may use this share more servers than a fresh placement (at least one more), else the fresh one
is applied: re-placement never consolidates, so without a bound the fleet would only grow as rates shift."""
MOVED_EXAMPLES = 16
UNPLACED_EXAMPLES = 16
FAILED_EXAMPLES = 3
"""Failed adapters the Degraded message names with their error (about 300 characters each)."""


@dataclass(frozen=True)
class ServerLoad:
    """What one server's pods hold, as the reconcile's loads left them (adapter_loading.server_loads)."""

    loaded: int
    """Placed adapters every answering pod of the server lists."""
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    """Failed adapters on any of its pods -> the engine's last error."""


@dataclass(frozen=True)
class Running:
    """One server as its live Deployment says it runs (what tessera wrote): its index and vLLM's flags."""

    index: int
    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int
    fetcher_image: str | None
    """The image of its weights fetchers (adapter_weights.py), None for a server written without them."""

    def keeps_flags(self, server: ServerPlacement) -> bool:
        """The server runs on with the placement's flags: its vLLM process stays."""
        return (self.max_loras, self.max_lora_rank) == (server.max_loras, server.max_lora_rank)


@dataclass(frozen=True)
class Moves:
    """What a placement changes of the previous one: adapters on another server or on a restarted one."""

    moved: tuple[str, ...]
    kept: int
    restarted: tuple[int, ...]
    """Servers (indices) kept with other flags: their vLLM restarts, so their adapters count as moved."""
    added: int
    """Adapters placed that no server held before (new in the spec, or unplaced before)."""
    dropped: int
    """Adapters held before that no server holds now (removed from the spec, or now unplaced)."""
    afresh: bool
    """The fresh placement was applied, not the re-placement (REPLACEMENT_SLACK)."""

    @property
    def changed(self) -> bool:
        return bool(self.moved or self.restarted or self.added or self.dropped)


@dataclass(frozen=True)
class Chosen:
    """The placement to apply, and, where there was one before, what it moves."""

    placement: Placement
    moves: Moves | None = None


@dataclass
class PoolServers:
    """What one AdapterPool's reconcile decided: its placement within the GPUs free for it, and their GPUs."""

    pool: AdapterPoolObject
    placement: Placement | None = None
    """An invalid pool's: its kept placement (`kept_placement`, None without a readable record); its running servers
    stay as they are, on the GPUs they hold."""
    slots: list[Slot] = dataclasses.field(default_factory=list)
    """The GPU of each placed server, in the placement's order."""
    held: list[Slot] = dataclasses.field(default_factory=list)
    """The GPUs its servers hold now (an invalid pool's last good servers)."""
    free: int = 0
    """The GPUs that were free for it (the pool's, less those other AdapterPools hold or took)."""
    quota: WholeGpuQuota | None = None
    """What its namespace's quota on whole GPUs left it, where that was less than `free`."""
    running: dict[int, Running] = dataclasses.field(default_factory=dict)
    """Its servers as their live Deployments run them, by index."""
    moves: Moves | None = None
    """What this placement changed of the one in force (None: none recorded)."""
    demand: RatesDecision | None = None
    """A pool with a demandSource: the rates placed for and why (None: the spec's rates)."""
    outranked_by: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Compound systems of a higher spec.poolPriority whose plan in force holds GPUs of the pool that are not free
    for it: system key -> (its poolPriority, the GPUs it holds)."""
    yields: bool = False
    """A compound system of the pool outranks it: its GPUs are lent to the compound solve, only for the systems
    above its spec.poolPriority."""

    @property
    def gpus(self) -> set[Slot]:
        """The GPUs its servers plan on or hold (no other AdapterPool takes them)."""
        return set(self.slots) | set(self.held)


# -- which GPU pool -------------------------------------------------------------

def assign_adapter_pools(objects: list[AdapterPoolObject], pools: list[Pool],
                         children: list[Json]) -> dict[str | None, list[AdapterPoolObject]]:
    """Each AdapterPool to the GPU pool of its spec.gpuProduct (the largest such), in name order; a spec too broken to
    name one to the pool its running servers are on (their GPUs stay reserved there); None: no such pool."""
    members: dict[str | None, list[AdapterPoolObject]] = {}
    for obj in sorted(objects, key=lambda o: o.ref.key):
        if obj.spec is not None:
            matching = [p for p in pools if p.gpu.name == obj.spec.gpu]
        else:
            nodes = {node for node, _ in server_slots(children, obj.ref).values()}
            matching = [p for p in pools if nodes & {n.name for n in p.nodes}]
        key = max(matching, key=lambda p: (p.gpus, p.key)).key if matching else None
        members.setdefault(key, []).append(obj)
    return members


# -- which GPUs -------------------------------------------------------------------

def placing_order(objects: list[AdapterPoolObject]) -> list[AdapterPoolObject]:
    """The order in which a GPU pool's AdapterPools take its free GPUs: invalid ones first (their running servers
    keep their GPUs), then the highest spec.poolPriority, then by name."""
    return sorted(objects, key=lambda o: (o.valid, -(o.spec.pool_priority if o.spec else 0), o.ref.key))


def compound_holders(state: Mapping[str, str]) -> dict[Slot, set[str]]:
    """Each GPU the pool's stored compound plan and its kept shares hold -> the systems with instances on it (read
    from its stored state; a kept share's GPUs are its system's)."""
    plan = stored_pool_plan(state)
    holders: dict[Slot, set[str]] = {}
    for gpu in placed_gpus(plan) if plan else []:
        holders.setdefault((gpu.node, gpu.gpu), set()).update(i.system for i in gpu.instances if i.system)
    for key, share in json.loads(state.get("kept", "{}")).items():
        for gpu in Share.model_validate(share).gpus:
            holders.setdefault((gpu.node, gpu.gpu), set()).add(key)
    return holders


def compound_gpus(state: Mapping[str, str]) -> set[Slot]:
    """The GPUs the pool's stored compound plan and its kept shares hold (read from its stored state)."""
    return set(compound_holders(state))


def outranking(holders: Mapping[Slot, set[str]], priorities: Mapping[str, int], priority: int) -> dict[Slot, set[str]]:
    """The GPUs an AdapterPool of `priority` may not take: those the compound plan in force holds for a system of
    that priority or higher (`priorities`: the pool's compound systems' spec.poolPriority; at equal priority what
    already runs keeps its GPUs) -> those systems. A GPU held only by lower priorities, or by systems whose priority
    is not known (deleted, or a spec too broken to read), it may claim."""
    found = {slot: {s for s in systems if s in priorities and priorities[s] >= priority}
             for slot, systems in holders.items()}
    return {slot: systems for slot, systems in found.items() if systems}


def higher_holders(outranked: Mapping[Slot, set[str]], priorities: Mapping[str, int],
                   priority: int) -> dict[str, tuple[int, int]]:
    """Of the GPUs not free for an AdapterPool of `priority`, those held for strictly higher priorities: system ->
    (its poolPriority, the GPUs it holds), for the status naming who took the capacity."""
    counts = Counter(s for systems in outranked.values() for s in systems if priorities[s] > priority)
    return {system: (priorities[system], gpus) for system, gpus in sorted(counts.items())}


def yields_to_compound(priority: int, compound: Sequence[int]) -> bool:
    """Whether an AdapterPool of `priority` lends its GPUs to the compound solve: where a compound system of the
    pool (`compound`, their spec.poolPriority) outranks it. They are lent only to the systems above `priority`
    (the planner's NodeState.usable_above), so one of its priority or lower, in a mixed pool, never takes them."""
    return bool(compound) and max(compound) > priority


def reserved_for(decided: Sequence[PoolServers]) -> dict[str, tuple[int, int]]:
    """Each AdapterPool with GPUs -> (its spec.poolPriority, those GPUs): no compound system of its priority or
    lower gets them (reserved, or lent only above it), for those systems' status naming a higher-priority one that
    holds capacity."""
    return {d.pool.ref.key: (d.pool.spec.pool_priority if d.pool.spec else 0, len(d.gpus))
            for d in decided if d.gpus}


def placed_compound_gpus(placement: NodePlacement) -> set[Slot]:
    """The GPUs the compound plan in force lays out (its placement of the pool's nodes)."""
    return {(node, index) for node, plan in placement.nodes.items() for index in plan.layouts}


def server_slots(children: list[Json], ref: PoolRef) -> dict[int, Slot]:
    """Server index -> the GPU its live Deployment sits on, for this pool's Deployments."""
    found = {}
    for child in owned_by(children, ref):
        annotations = child["metadata"].get("annotations") or {}
        index, gpu = annotations.get(SERVER_ANNOTATION), annotations.get(GPU_ANNOTATION)
        if child["kind"] == "Deployment" and index and gpu and "/" in gpu:
            node, device = gpu.rsplit("/", 1)
            if index.isdigit() and device.isdigit():
                found[int(index)] = (node, int(device))
    return found


def free_gpus(pool: Pool, taken: set[Slot], busy: set[Slot]) -> list[Slot]:
    """The pool's GPUs no AdapterPool took yet: those no compound plan holds (`busy`) first, each group from the
    pool's last GPU backwards."""
    free = [(node.name, index) for node, index in reversed(pool.slots()) if (node.name, index) not in taken]
    return [s for s in free if s not in busy] + [s for s in free if s in busy]


def choose_slots(pool: Pool, indices: Sequence[int], held: dict[int, Slot], taken: set[Slot],
                 busy: set[Slot]) -> list[Slot]:
    """A GPU for each server (by its index): a server keeps the GPU it holds while it is in the pool and free, the
    others take the first free ones (`free_gpus`)."""
    in_pool = {(node.name, index) for node, index in pool.slots()}
    kept = {i: slot for i, slot in held.items() if i in indices and slot in in_pool and slot not in taken}
    if len(set(kept.values())) < len(kept):  # two servers on one GPU (a hand edit): only the first keeps it
        kept = {i: slot for i, slot in sorted(kept.items()) if slot not in
                {s for j, s in kept.items() if j < i}}
    spare = iter(free_gpus(pool, taken | set(kept.values()), busy))
    return [kept[i] if i in kept else next(spare) for i in indices]


def gpus_allowed(free: int, quota: WholeGpuQuota | None) -> tuple[int, WholeGpuQuota | None]:
    """The GPUs an AdapterPool may place servers on: those free for it, at most what its namespace's quota on whole
    GPUs leaves; and that quota where it is the tighter."""
    if quota is None or quota.limit >= free:
        return free, None
    return quota.limit, quota


def within(problem: PlacementProblem, gpus: int) -> PlacementProblem:
    """The placement problem with the pool's server limit cut to the GPUs free for it."""
    most = problem.limits.max_servers
    limits = dataclasses.replace(problem.limits, max_servers=gpus if most is None else min(most, gpus))
    return dataclasses.replace(problem, limits=limits)


# -- re-placement -------------------------------------------------------------------

def last_flag(args: Sequence[str], flag: str) -> int | None:
    """The value of the last `flag` in vLLM's arguments (argparse keeps the last: tessera's come last)."""
    found = [args[i + 1] for i in range(len(args) - 1) if args[i] == flag]
    return int(found[-1]) if found and found[-1].isdigit() else None


def running_servers(children: list[Json], ref: PoolRef) -> dict[int, Running]:
    """Each of the pool's server Deployments as tessera wrote it: its index and vLLM's flags (its container's
    arguments), by index; a Deployment whose flags are unreadable is left out."""
    found = {}
    for child in owned_by(children, ref):
        annotations = child["metadata"].get("annotations") or {}
        index = annotations.get(SERVER_ANNOTATION, "")
        pod = ((child.get("spec") or {}).get("template") or {}).get("spec", {})
        containers = pod.get("containers") or [{}]
        args = [str(a) for a in containers[0].get("args") or []]
        flags = [last_flag(args, f) for f in ("--max-loras", "--max-lora-rank", "--max-cpu-loras")]
        if child["kind"] == "Deployment" and index.isdigit() and None not in flags:
            slots, rank, cpu = (int(f or 0) for f in flags)
            found[int(index)] = Running(int(index), slots, rank, cpu, running_fetcher_image(pod))
    return found


def placement_record_name(ref: PoolRef) -> str:
    return child_name(ref.name, "placement")


def placement_record(ref: PoolRef, placement: Placement, rates: Mapping[str, float] | None = None) -> Json:
    """The pool's placement ConfigMap: each server's index, Deployment, flags and adapters, owned by the pool; and
    the rates placed for, for a pool with a demandSource."""
    servers = [{"index": s.index, "deployment": deployment_name(ref, s.index), "maxLoras": s.max_loras,
                "maxLoraRank": s.max_lora_rank, "adapters": sorted(s.adapters)} for s in placement.servers]
    return with_applied_hash({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": placement_record_name(ref), "namespace": ref.namespace,
                     "labels": naming.pool_child_labels(ref.name, PLACEMENT_COMPONENT),
                     "ownerReferences": [ref.owner_reference()]},
        "data": {PLACEMENT_KEY: json.dumps({"servers": servers}, separators=(",", ":")),
                 **({RATES_KEY: rates_record(rates)} if rates is not None else {})}})


def list_of(value: Any) -> list[Any]:
    """The value, where it is a JSON list (the record's shape); else a TypeError, as any other misshape."""
    if not isinstance(value, list):
        raise TypeError(f"a list, not {type(value).__name__}")
    return value


def placement_configmap(children: list[Json], ref: PoolRef) -> Json | None:
    return next((c for c in owned_by(children, ref) if c["kind"] == "ConfigMap"
                 and c["metadata"]["name"] == placement_record_name(ref)), None)


def placed_rates(children: list[Json], ref: PoolRef) -> dict[str, float] | None:
    """The rates the placement in force was made for, as its ConfigMap records them; None: not recorded."""
    return recorded_rates(((placement_configmap(children, ref) or {}).get("data") or {}).get(RATES_KEY))


def with_rates(problem: PlacementProblem, rates: Mapping[str, float]) -> PlacementProblem:
    """The problem with each adapter at its decided rate."""
    return dataclasses.replace(problem, adapters=tuple(AdapterDemand(a.name, a.rank, rates.get(a.name, a.rate_rps))
                                                       for a in problem.adapters))


def recorded_servers(children: list[Json], ref: PoolRef) -> list[tuple[int, tuple[str, ...], int, int]] | None:
    """(index, adapters, --max-loras, --max-lora-rank) of each server the placement ConfigMap records; None: no
    ConfigMap, or one tessera did not write (unreadable)."""
    record = placement_configmap(children, ref)
    try:
        servers = json.loads(((record or {}).get("data") or {})[PLACEMENT_KEY])["servers"]
        found = [(int(s["index"]), tuple(str(a) for a in list_of(s["adapters"])), int(s["maxLoras"]),
                  int(s["maxLoraRank"])) for s in list_of(servers)]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return found if len({index for index, *_ in found}) == len(found) else None


def previous_placement(children: list[Json], ref: PoolRef, running: Mapping[int, Running],
                       model: str) -> Placement | None:
    """The placement in force, for `replace_adapters` (which reads each server's index, adapters and two flags):
    the servers and adapters the placement ConfigMap records, with the flags their Deployments run where they do;
    None: no readable record."""
    recorded = recorded_servers(children, ref)
    if recorded is None:
        return None
    seen: set[str] = set()
    servers = []
    for index, adapters, slots, rank in sorted(recorded):
        if index in running:
            slots, rank = running[index].max_loras, running[index].max_lora_rank
        kept = tuple(a for a in adapters if a not in seen)  # an adapter recorded twice (an edit): the first only
        seen.update(kept)
        servers.append(ServerPlacement(index=index, adapters=kept, max_loras=slots, max_lora_rank=rank, rate_rps=0.0,
                                       starts=True, predicted=None))
    return Placement(strategy="in force", model=model, servers=tuple(servers))


def kept_placement(obj: AdapterPoolObject, children: list[Json], held: Mapping[int, Slot]) -> Placement | None:
    """An invalid pool's placement in force, kept (its pods loaded and gated) and reported while its spec is broken:
    the servers its placement ConfigMap records that still run on a GPU of theirs (`held`, by index), with the flags
    their Deployments run; None: no readable record (its servers then stay as they are, neither loaded nor gated)."""
    running = running_servers(children, obj.ref)
    recorded = previous_placement(children, obj.ref, running, obj.spec.base_model.name if obj.spec else "")
    if recorded is None:
        return None
    return dataclasses.replace(recorded, servers=tuple(s for s in recorded.servers
                                                       if s.index in running and s.index in held))


def cut_to_limit(placement: Placement, most: int | None) -> Placement:
    """The first `most` servers (a re-placement lists its running servers first); the others' adapters unplaced."""
    if most is None or len(placement.servers) <= most:
        return placement
    cut = placement.servers[most:]
    return dataclasses.replace(placement, servers=placement.servers[:most],
                               unplaced=placement.unplaced + tuple(n for s in cut for n in s.adapters))


def moves_between(previous: Placement, placement: Placement, afresh: bool) -> Moves:
    """What `placement` changes of `previous`: an adapter moves when its server's index differs, or its server
    keeps its index with other flags (a restart)."""
    before = {name: server for server in previous.servers for name in server.adapters}
    after = {name: server for server in placement.servers for name in server.adapters}
    flags = {s.index: (s.max_loras, s.max_lora_rank) for s in previous.servers}
    restarted = tuple(sorted(s.index for s in placement.servers
                             if s.index in flags and flags[s.index] != (s.max_loras, s.max_lora_rank)))
    moved = tuple(sorted(name for name, server in after.items() if name in before and (
        before[name].index != server.index or server.index in restarted)))
    both = before.keys() & after.keys()
    return Moves(moved=moved, kept=len(both) - len(moved), restarted=restarted, added=len(after.keys() - both),
                 dropped=len(before.keys() - both), afresh=afresh)


def matched_to(previous: Placement, fresh: Placement) -> Placement:
    """The fresh placement numbered after the one in force: each server takes the index of the previous server it
    shares the most adapters with (on a tie, one with its flags, then the lower index), so that server keeps its
    Deployment, GPU and the adapters they share; the others take the lowest indices left."""
    was = {name: server.index for server in previous.servers for name in server.adapters}
    flags = {s.index: (s.max_loras, s.max_lora_rank) for s in previous.servers}
    pairs = []
    for position, server in enumerate(fresh.servers):
        shared = Counter(was[name] for name in server.adapters if name in was)
        pairs += [(-count, flags[index] != (server.max_loras, server.max_lora_rank), index, position)
                  for index, count in shared.items()]
    index_of: dict[int, int] = {}
    for _, _, index, position in sorted(pairs):
        if position not in index_of and index not in index_of.values():
            index_of[position] = index
    spare = (i for i in itertools.count() if i not in index_of.values())
    servers = [dataclasses.replace(s, index=index_of[p] if p in index_of else next(spare))
               for p, s in enumerate(fresh.servers)]
    return dataclasses.replace(fresh, servers=tuple(servers))


def replacement_slack(fresh_servers: int) -> int:
    return max(1, math.ceil(REPLACEMENT_SLACK * fresh_servers))


def choose_placement(problem: PlacementProblem, previous: Placement | None) -> Chosen:
    """The placement to apply: without a previous one, tessera's fresh placement; with one, its re-placement
    (`replace_adapters`, within the server limit), unless that leaves more adapters unplaced than a fresh
    placement, or needs more than `replacement_slack` servers beyond it: then the fresh one, `matched_to` the
    servers in force."""
    fresh = place(problem, "tessera")
    if previous is None:
        return Chosen(fresh)
    replaced = cut_to_limit(replace_adapters(problem, previous).placement, problem.limits.max_servers)
    afresh = (len(replaced.unplaced) > len(fresh.unplaced)
              or len(replaced.servers) > len(fresh.servers) + replacement_slack(len(fresh.servers)))
    chosen = matched_to(previous, fresh) if afresh else replaced
    return Chosen(chosen, moves_between(previous, chosen, afresh))


# -- the servers ------------------------------------------------------------------

def deployment_name(ref: PoolRef, index: int) -> str:
    """The same Deployment for server `index` across placements (its flags change, its name does not)."""
    return child_name(ref.name, "server", str(index))


def cpu_loras(server: ServerPlacement, running: Running | None) -> int:
    """--max-cpu-loras: every adapter of the server in its CPU cache (vLLM wants at least --max-loras there); a
    running server that keeps its flags keeps its value, since any change of the argument restarts vLLM: adapters
    a re-placement adds beyond it are evicted from the CPU cache by vLLM when cold, and read from their path again
    on their next request (docs/adapter-loading.md)."""
    if running is not None and running.keeps_flags(server):
        return running.max_cpu_loras
    return max(len(server.adapters), server.max_loras)


def server_args(spec: AdapterPoolSpec, server: ServerPlacement, port: int, max_cpu_loras: int) -> list[str]:
    """vLLM's arguments: the user's, then tessera's, which win where both set a flag (argparse keeps the last); the
    base model from its local folder (adapter_weights.py), served under its name."""
    return [*spec.base_model.args,
            "--model", base_model_path(spec), "--served-model-name", spec.base_model.name, "--port", str(port),
            "--enable-lora", "--max-loras", str(server.max_loras), "--max-lora-rank", str(server.max_lora_rank),
            "--max-cpu-loras", str(max_cpu_loras), "--max-model-len", str(spec.base_model.max_model_len)]


def server_env(spec: AdapterPoolSpec) -> list[Json]:
    """The user's environment, and the switch for vLLM's runtime LoRA endpoints (tessera's value wins)."""
    env = [{"name": e.name, "value": e.value} for e in spec.base_model.env if e.name != RUNTIME_LORA_ENV]
    return [*env, {"name": RUNTIME_LORA_ENV, "value": "True"}]


def server_deployment(ref: PoolRef, spec: AdapterPoolSpec, server: ServerPlacement, slot: Slot, hostname: str,
                      settings: OperatorSettings, running: Running | None = None) -> Json:
    """One vLLM server on one whole GPU of its node, owned by the AdapterPool."""
    index = server.index
    name = deployment_name(ref, index)
    labels = naming.pool_child_labels(ref.name, SERVER_COMPONENT)
    pod_labels = {**labels, "tessera.ai/deployment": name}
    container = {
        "name": SERVER_CONTAINER,
        "image": spec.base_model.image,
        "args": server_args(spec, server, settings.server_port, cpu_loras(server, running)),
        "env": server_env(spec),
        "ports": [{"name": "http", "containerPort": settings.server_port}],
        "resources": {"limits": {WHOLE_GPU_RESOURCE: "1"}, "requests": {WHOLE_GPU_RESOURCE: "1"}},
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
        "volumeMounts": server_mounts(spec),
    }
    # a server that keeps its flags keeps its fetchers' image: a new tessera image alone restarts no vLLM
    kept_image = running.fetcher_image if running is not None and running.keeps_flags(server) else None
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ref.namespace, "labels": labels,
                     "annotations": {SERVER_ANNOTATION: str(index), GPU_ANNOTATION: f"{slot[0]}/{slot[1]}"},
                     "ownerReferences": [ref.owner_reference()]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, "tessera.ai/deployment": name}},
            "strategy": {"type": "Recreate"},  # one GPU per server: a surge pod would wait for it
            "template": {"metadata": {"labels": pod_labels}, "spec": {
                "securityContext": RESTRICTED_POD_SECURITY,
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}}},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                # Ready (and in its Services) only once its server lists its adapters (adapter_loading.py)
                "readinessGates": [{"conditionType": naming.ADAPTERS_LOADED}],
                # the weights reach the pod through tessera's fetchers (adapter_weights.py)
                "initContainers": fetch_containers(spec, kept_image or settings.frontend_image),
                "containers": [container],
                "volumes": weights_volumes(spec),
            }},
        },
    }
    return with_applied_hash(body)


def planned_servers(pool: Pool, decided: PoolServers, settings: OperatorSettings,
                    compound: set[Slot], mig: Mapping[str, NodeMig], first_plan_solving: bool = False
                    ) -> list[tuple[Json, bool]]:
    """Each placed server's Deployment, and whether to apply it now: not while the compound plan in force holds
    its GPU, nor while its node waits for a MIG layout (mig-manager re-partitions only nodes no GPU pod uses),
    nor while the pool's first compound plan is being solved (`first_plan_solving`): that plan's layouts are not
    known yet, and a server started meanwhile would hold a node its first layout must partition."""
    if decided.placement is None or decided.pool.spec is None or not decided.pool.valid:
        return []  # an invalid pool's kept placement is no plan: its servers stay as they run
    planned = []
    for server, slot in zip(decided.placement.servers, decided.slots):
        body = server_deployment(decided.pool.ref, decided.pool.spec, server, slot, pool.node(slot[0]).hostname,
                                 settings, decided.running.get(server.index))
        node_mig = mig.get(slot[0])
        planned.append((body, not first_plan_solving and slot not in compound
                        and (node_mig is None or node_mig.applied)))
    return planned


def mig_off_for_servers(pool: Pool, decided: Sequence[PoolServers], placement: NodePlacement) -> dict[str, NodeMig]:
    """MIG off for each node a valid AdapterPool's server is planned on that the compound plan in force lays out
    nothing on but whose GPUs still advertise MIG instances (a compound plan partitioned it, then a higher-priority
    AdapterPool claimed it): without the relabel its whole GPU is never advertised and the server never schedules.
    A node that advertises no instance (MIG off already) gets none."""
    nodes = {node for d in decided if d.pool.valid for node, _ in d.slots} - set(placement.nodes)
    return {name: layout_of_node(pool, name, NodePlan(name, pool.node(name).gpu_count)) for name in sorted(nodes)
            if pool.node(name).advertised_counts()}


def owned_by(children: list[Json], ref: PoolRef) -> list[Json]:
    """The children this AdapterPool controls."""
    return [c for c in children if c["metadata"].get("namespace") == ref.namespace and any(
        o.get("kind") == "AdapterPool" and o.get("controller") and o.get("uid") == ref.uid
        for o in c["metadata"].get("ownerReferences") or [])]


def decide_servers(planned: list[tuple[Json, bool]], live: list[Json], valid: bool) -> list[Action]:
    """Apply each server that differs from its live Deployment and may go now, and its PodDisruptionBudget with it
    (builders.disruption_budget, as a compound system's servers get); delete the pool's Deployments no placement
    wants, each budget after its Deployment (the same reconcile). An invalid pool gets neither: its last good
    servers keep running."""
    if not valid:
        return []
    by_name = {c["metadata"]["name"]: c for c in live if c["kind"] == "Deployment"}
    budgets = {c["metadata"]["name"]: c for c in live if c["kind"] == BUDGET}
    actions: list[Action] = []
    for body, now in planned:
        name = body["metadata"]["name"]
        for wanted, current in ((body, by_name.get(name)), (disruption_budget(body), budgets.get(name))):
            if now and (current is None or applied_hash(current) != applied_hash(wanted)):
                actions.append(ApplyChild(wanted, reason="not there yet" if current is None
                                          else "differs from the placement"))
    wanted_names = {body["metadata"]["name"] for body, _ in planned}
    for children in (by_name, budgets):
        for name, child in sorted(children.items()):
            if name not in wanted_names:
                actions.append(DeleteChild(child, reason="no server of the placement wants it"))
    return actions


def decide_placement_record(decided: PoolServers, live: list[Json]) -> list[Action]:
    """Write the placement ConfigMap where it differs from the placement decided (an invalid pool's stays)."""
    if decided.placement is None or not decided.pool.valid:
        return []
    body = placement_record(decided.pool.ref, decided.placement, decided.demand.rates if decided.demand else None)
    current = next((c for c in live if c["kind"] == "ConfigMap" and c["metadata"]["name"] == body["metadata"]["name"]),
                   None)
    if current is not None and applied_hash(current) == applied_hash(body):
        return []
    return [ApplyChild(body, reason="the placement's record " + ("is not there yet" if current is None else "differs"))]


# -- status -------------------------------------------------------------------------

def replacement_summary(decided: PoolServers) -> ReplacementSummary | None:
    """status.plan.lastReplacement: this reconcile's re-placement where it changed the servers' adapters, else the
    one the status holds (an unchanged placement is no re-placement; the record stays until the next one)."""
    moves = decided.moves
    if moves is None or not moves.changed:
        held = (decided.pool.status.get("plan") or {}).get("lastReplacement")
        try:
            return ReplacementSummary.model_validate(held)
        except ValidationError:  # not what tessera wrote (an edit): no record
            return None
    return ReplacementSummary(moved=len(moves.moved), kept=moves.kept, restarted=len(moves.restarted),
                              added=moves.added, dropped=moves.dropped, afresh=moves.afresh,
                              moved_examples=list(moves.moved[:MOVED_EXAMPLES]))


def placement_summary(decided: PoolServers, planned: list[tuple[Json, bool]], live: list[Json],
                      loads: Mapping[tuple[str, str], ServerLoad], routes: RouteNames | None = None) -> Json:
    """status.plan: counts, a bounded list of unplaced names, per server its flags, GPU, readiness and
    adapters loaded and failed, and the routes' names."""
    placement, problem = decided.placement, decided.pool.problem
    assert placement is not None and problem is not None and decided.pool.spec is not None
    by_name = {c["metadata"]["name"]: c for c in live if c["kind"] == "Deployment"}
    rates = decided.demand.rates if decided.demand else {a.name: a.rate_rps for a in problem.adapters}
    namespace = decided.pool.ref.namespace
    servers = []
    for (body, _), server, slot in zip(planned, placement.servers, decided.slots):
        name = body["metadata"]["name"]
        load = loads.get((namespace, name))
        servers.append(ServerSummary(
            name=name, adapters=len(server.adapters), lora_slots=server.max_loras, max_lora_rank=server.max_lora_rank,
            node=slot[0], gpu=slot[1], ready=name in by_name and available(by_name[name], body),
            adapters_loaded=load.loaded if load else None, adapters_failed=len(load.failed) if load else None))
    twin = [s.twin.min_served_fraction for s in placement.servers if s.twin is not None]
    summary = AdapterPlacementSummary(
        gpu=decided.pool.spec.gpu, gpus=len(placement.servers),
        adapters_placed=sum(len(s.adapters) for s in placement.servers),
        adapters_unplaced=len(placement.unplaced), unplaced_examples=list(placement.unplaced[:UNPLACED_EXAMPLES]),
        predicted_min_served_fraction=min(twin) if twin and len(twin) == len(placement.servers) else None,
        rate_placed_rps=round(sum(rates[n] for s in placement.servers for n in s.adapters), 6),
        rate_rps=round(sum(rates.values()), 6), servers_ready=sum(s.ready for s in servers),
        adapters_failed=sum(s.adapters_failed or 0 for s in servers), servers=servers, routes=routes,
        last_replacement=replacement_summary(decided), config_map=placement_record_name(decided.pool.ref))
    return summary.model_dump(by_alias=True, mode="json", exclude_none=True)


def load_failed_message(namespace: str, loads: Mapping[tuple[str, str], ServerLoad]) -> str | None:
    """Degraded's message for the pool's failed adapters (a few named, with the server and the engine's error);
    None: none failed."""
    failed = [(server, name, error) for (ns, server), load in sorted(loads.items()) if ns == namespace
              for name, error in load.failed.items()]
    if not failed:
        return None
    named = "; ".join(f"{name} on {server}: {error}" for server, name, error in failed[:FAILED_EXAMPLES])
    more = f"; and {len(failed) - FAILED_EXAMPLES} more" if len(failed) > FAILED_EXAMPLES else ""
    return (f"{len(failed)} adapter load(s) failed repeatedly and are retried with back-off (the other adapters "
            f"serve): {named}{more}")


def unrouted_message(routes: RouteNames | None) -> str | None:
    """Degraded's message for adapters that got no route (both names taken); None: every adapter has one."""
    if routes is None or not routes.unrouted:
        return None
    return (f"{routes.unrouted} adapter(s) have no route, both their Service names are taken in the namespace "
            f"(rename the Service that holds one, or the adapter): {', '.join(routes.unrouted_examples)}"
            + (", ..." if routes.unrouted > len(routes.unrouted_examples) else ""))


def _unplaced(obj: AdapterPoolObject, decided: PoolServers, summary: Json) -> tuple[str, str]:
    """(reason, message) for adapters that fit no server, in the order of precedence: the namespace's quota where it
    held the servers to what it leaves (QuotaReached), compound systems of a higher priority holding GPUs of the
    pool (PreemptedByPriority, naming them), else the GPUs free for the pool or limits.maxServers
    (InsufficientCapacity)."""
    assert decided.placement is not None
    placed, unplaced, servers = summary["adaptersPlaced"], summary["adaptersUnplaced"], len(decided.placement.servers)
    share = summary["placedRequestsPerSecond"] / summary["requestsPerSecond"] if summary["requestsPerSecond"] else 1
    carried = (f"carry {share:.0%} of its expected rate ({summary['placedRequestsPerSecond']:g} of "
               f"{summary['requestsPerSecond']:g} requests/s)")
    quota = decided.quota
    if quota is not None and servers >= quota.limit:
        return st.QUOTA_REACHED, (f"{unplaced} of {placed + unplaced} adapters fit no server within the namespace's "
                                  f"quota: {quota.source} leaves tessera {quota.limit} of the {decided.free} GPU(s) "
                                  f"free for the pool; {servers} server(s) {carried}; raise the quota to serve more")
    if decided.outranked_by:
        above = sorted(decided.outranked_by.items(), key=lambda item: (-item[1][0], item[0]))
        taken = ", ".join(f"{system} (poolPriority {priority}, {gpus} GPU(s))" for system, (priority, gpus) in above[:5])
        more = f" and {len(above) - 5} more" if len(above) > 5 else ""
        return st.PREEMPTED_BY_PRIORITY, (
            f"{unplaced} of {placed + unplaced} adapters fit no server: compound systems of a higher spec.poolPriority "
            f"than its {obj.spec.pool_priority if obj.spec else 0} took the pool's GPUs first: {taken}{more}; "
            f"{servers} server(s) on the {decided.free} GPU(s) left free for the pool {carried}; raise its "
            "poolPriority or add GPUs to serve more")
    return st.INSUFFICIENT_CAPACITY, (f"{unplaced} of {placed + unplaced} adapters fit no server: {servers} server(s) "
                                      f"on the {decided.free} GPU(s) free for the pool (limits.maxServers "
                                      f"{obj.spec.limits.max_servers if obj.spec else '?'}) {carried}; "
                                      "add GPUs or raise limits.maxServers")


def kept_message(obj: AdapterPoolObject, decided: PoolServers | None, live: list[Json]) -> str:
    """What an invalid pool keeps: the placement in force, as its ConfigMap records it, where it has one."""
    if decided is not None and decided.placement is not None and decided.placement.servers:
        servers = decided.placement.servers
        return (f"; its running servers stay until the spec is fixed, with the placement in force: "
                f"{sum(len(s.adapters) for s in servers)} adapters on {len(servers)} server(s) (ConfigMap "
                f"{placement_record_name(obj.ref)})")
    return "; its running servers stay until the spec is fixed" if any(c["kind"] == "Deployment" for c in live) else ""


def pool_status(obj: AdapterPoolObject, decided: PoolServers | None, planned: list[tuple[Json, bool]],
                live: list[Json], loads: Mapping[tuple[str, str], ServerLoad] | None = None,
                routes: RouteNames | None = None) -> tuple[str, list[st.Condition], Json | None]:
    """(phase, conditions, status.plan or None to keep the last one) of one AdapterPool; `decided` None: no GPU
    pool of its product; `loads`: what its servers' pods hold (none asked yet: absent); `routes`: its routes'
    names (adapter_routes.route_summaries)."""
    if not obj.valid:
        message = (obj.error or "") + kept_message(obj, decided, live)
        return st.PHASE_INVALID, [st.Condition(st.READY, False, st.INVALID_SPEC, message),
                                  st.Condition(st.ADAPTERS_PLACED, False, st.INVALID_SPEC, message),
                                  st.Condition(st.INVALID, True, st.INVALID_SPEC, message)], None
    valid = st.Condition(st.INVALID, False, st.SPEC_VALID, "the spec is valid and the placement can use it")
    if decided is None or decided.placement is None:
        assert obj.spec is not None
        message = f"no schedulable nodes of GPU product {obj.spec.gpu!r} (spec.gpuProduct)"
        return st.PHASE_PENDING, [st.Condition(st.READY, False, st.NO_GPU_POOL, message),
                                  st.Condition(st.ADAPTERS_PLACED, False, st.NO_GPU_POOL, message), valid], None
    summary = placement_summary(decided, planned, live, loads or {}, routes)
    placed, unplaced = summary["adaptersPlaced"], summary["adaptersUnplaced"]
    failed = load_failed_message(obj.ref.namespace, loads or {})
    unrouted = unrouted_message(routes)
    conditions = [valid]
    if unplaced:
        reason, message = _unplaced(obj, decided, summary)
        conditions += [st.Condition(st.ADAPTERS_PLACED, False, reason, message),
                       st.Condition(st.DEGRADED, True, reason, "; ".join(m for m in (message, failed, unrouted) if m))]
    else:
        message = f"{placed} adapters on {len(decided.placement.servers)} server(s)"
        conditions += [st.Condition(st.ADAPTERS_PLACED, True, st.ALL_ADAPTERS_PLACED, message),
                       st.Condition(st.DEGRADED, True, st.ADAPTER_LOAD_FAILED,
                                    "; ".join(m for m in (failed, unrouted) if m)) if failed else
                       st.Condition(st.DEGRADED, True, st.ROUTE_NAME_TAKEN, unrouted) if unrouted else
                       st.Condition(st.DEGRADED, False, st.DEMAND_SERVED, "every adapter is placed on a server")]
    ready, total = summary["serversReady"], len(summary["servers"])
    waiting = sum(1 for _, now in planned if not now)
    servers = f"{ready} of {total} server Deployments available" + (
        f"; {waiting} wait for their GPU (held by a compound plan in force, its node's MIG layout, or the pool's "
        "first compound plan)"
        if waiting else "")
    if ready == total:
        conditions.append(st.Condition(st.READY, True, st.SERVERS_READY, servers))
        return (st.PHASE_DEGRADED if unplaced or failed or unrouted else st.PHASE_READY), conditions, summary
    was_ready = any(c.get("type") == st.READY and c.get("status") == "True" for c in obj.status.get("conditions") or [])
    conditions.append(st.Condition(st.READY, False, st.SERVERS_UNAVAILABLE if was_ready else st.SERVERS_STARTING,
                                   servers))
    return st.PHASE_DEPLOYING, conditions, summary


def decide_pool_status(obj: AdapterPoolObject, new: Json, now: str) -> list[Action]:
    """The status patch when the status changed, then an Event per decision (none on an idle resync)."""
    if not st.status_changed(obj.status, new):
        return []
    actions: list[Action] = [PatchStatus(obj.ref.namespace, obj.ref.name, new, reason="status changed", plural=PLURAL)]
    for event in [*st.events_for(obj.status, new), *replacement_event(obj.status, new)]:
        actions.append(PostEvent(st.event_body(obj.ref, event, now),
                                 reason=f"{event.type} event {event.reason}"))
    return actions


def replacement_event(old: Json, new: Json) -> list[st.EventSpec]:
    """A Normal Event for a new status.plan.lastReplacement that moved adapters (once: the record stays)."""
    before, after = ((s.get("plan") or {}).get("lastReplacement") for s in (old, new))
    if not after or after == before or not after["adaptersMoved"]:
        return []
    how = ("the fresh placement (the re-placement needed too many servers or left more adapters unplaced)"
           if after["placedAfresh"] else "a re-placement")
    named = ", ".join(after.get("movedAdapterExamples") or [])
    return [st.EventSpec("Normal", st.ADAPTERS_REPLACED, (
        f"{how} moved {after['adaptersMoved']} adapter(s) to another server ({named}"
        f"{', ...' if after['adaptersMoved'] > len(after.get('movedAdapterExamples') or []) else ''}), kept "
        f"{after['adaptersKept']}, restarted {after['serversRestarted']} server(s); {after['adaptersAdded']} added, "
        f"{after['adaptersDropped']} dropped"))]
