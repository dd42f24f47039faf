"""Place the solved layout counts on concrete GPUs and replicas on MIG instances.

The MILP decides how many GPUs use each layout (and how many of each group
of fixed GPUs tessera uses); this cheap step decides which GPU of which node
gets which. It keeps every GPU whose current layout is still wanted (a
re-partition stops its pods), whole nodes first (mig-manager re-partitions
a node at a time): first as many nodes of each group as the MILP's change
price kept (change_cost.py), GPUs without instances there included, and
every replica on the instance it already has. GPUs lent only to systems
above a priority (`usable_above`) get at least the layouts the MILP counted
for each lower level moved off them (`lend`), and take only those systems'
replicas: replicas go lowest priority first, onto the GPUs lent to the
fewest first, which finds a placement wherever the MILP's counts allow one
(the GPUs a priority may use contain those of every lower one).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from tessera.planner.catalog import Layout
from tessera.planner.change_cost import NodeGroup
from tessera.planner.errors import PlannerBug
from tessera.planner.nodes import PlannableGpu, PoolGpus
from tessera.planner.plan import ConfigPlan, GpuPlan, InstancePlan, Plan, TaskPlan
from tessera.planner.profiles import SegmentType

ConfigKey = tuple[str, str, str, SegmentType, int]  # (system, task, variant, segment, batch)
GpuKey = tuple[str | None, int | None]  # (node, device) on a pool of nodes, (None, index) on a plain pool
Replica = tuple[str, str, int]  # (system, task, index of the task's configuration)


def layout_of(gpu: GpuPlan) -> Layout:
    return tuple(sorted((name, count) for name, count in gpu.layout))


def gpu_key(node: str | None, device: int | None, index: int) -> GpuKey:
    return (node, device) if node is not None else (None, index)


def current_layout_counts(current: Plan) -> dict[Layout, int]:
    return dict(Counter(layout_of(g) for g in current.gpus))


def config_key(task: TaskPlan, config: ConfigPlan) -> ConfigKey:
    """What identifies a configuration across plans (the MILP's candidate key)."""
    return (task.system, task.task, task.variant, config.segment, config.batch)


def current_replica_counts(current: Plan) -> dict[ConfigKey, int]:
    counts: dict[ConfigKey, int] = {}
    for task in current.tasks:
        for config in task.configs:
            key = config_key(task, config)
            counts[key] = counts.get(key, 0) + config.replicas
    return counts


def _config_key(tasks_by_key: dict[tuple[str | None, str | None], TaskPlan], instance: InstancePlan,
                ) -> ConfigKey | None:
    if instance.config is None:
        return None
    task = tasks_by_key.get((instance.system, instance.task))
    if task is None or not 0 <= instance.config < len(task.configs):
        return None
    return config_key(task, task.configs[instance.config])


class _Chooser:
    """Which plannable GPU gets which layout."""

    def __init__(self, pool: PoolGpus, current: Plan | None) -> None:
        self.pool = pool
        previous = {gpu_key(g.node, g.device, g.index): layout_of(g) for g in current.gpus} if current else {}
        self.ran_tessera = set(previous)
        # A node pool knows every GPU's layout; a plain pool only what the last plan chose.
        self.current = {self.key(g): g.current if g.current is not None else previous.get(self.key(g))
                        for g in pool.gpus}
        self.chosen: dict[int, Layout] = {}
        self.blank: set[int] = set()  # GPUs without instances on nodes kept whole: they stay so

    @staticmethod
    def key(gpu: PlannableGpu) -> GpuKey:
        return gpu_key(gpu.node, gpu.device, gpu.index)

    def fixed(self, fixed_counts: list[tuple[Layout, Layout, int]]) -> None:
        for layout, usable, count in fixed_counts:
            group = [g for g in self.pool.gpus if g.fixed and (g.current, g.usable) == (layout, usable)]
            group.sort(key=lambda g: self.key(g) not in self.ran_tessera)
            if len(group) < count:
                raise PlannerBug(f"the plan uses {count} fixed GPUs with layout {layout}, the pool has {len(group)}")
            for gpu in group[:count]:
                self.chosen[gpu.index] = layout

    def kept_whole(self, kept_nodes: Sequence[tuple[NodeGroup, int]], wanted: Counter[Layout]) -> None:
        """The nodes the MILP keeps, as many of each group as it says, those tessera ran on first."""
        for group, count in kept_nodes:
            nodes = sorted(group.nodes, key=lambda n: not any(k[0] == n for k in self.ran_tessera))[:count]
            for gpu in self.pool.free:
                if gpu.node not in nodes:
                    continue
                layout = self.current[self.key(gpu)]
                if layout:
                    self._take(gpu, layout, wanted)
                else:
                    self.blank.add(gpu.index)

    def free(self, layout_counts: list[tuple[Layout, int]], kept_nodes: Sequence[tuple[NodeGroup, int]] = ()) -> None:
        wanted = Counter(dict(layout_counts))
        self.kept_whole(kept_nodes, wanted)
        free = [g for g in self.pool.free if g.index not in self.blank]
        for node in dict.fromkeys(g.node for g in free if g.node is not None):
            kept = [(g, layout) for g in free if g.node == node and (layout := self.current[self.key(g)])]
            needs = Counter(layout for _, layout in kept)
            if any(g.index in self.chosen for g, _ in kept):
                continue
            if kept and all(wanted[layout] >= count for layout, count in needs.items()):
                for gpu, layout in kept:
                    self._take(gpu, layout, wanted)
        for gpu in free:
            layout = self.current[self.key(gpu)]
            if gpu.index not in self.chosen and layout and wanted[layout] > 0:
                self._take(gpu, layout, wanted)
        # New layouts go first where nothing runs now, then where tessera ran, then anywhere.
        rest = sorted((g for g in free if g.index not in self.chosen),
                      key=lambda g: (bool(self.current[self.key(g)]), self.key(g) not in self.ran_tessera))
        for layout, count in sorted(wanted.items()):
            for _ in range(count):
                if not rest:
                    raise PlannerBug(f"the plan uses more GPUs than the pool has free (layout {layout})")
                self._take(rest.pop(0), layout, wanted)

    def lend(self, levels: Sequence[tuple[int, Mapping[Layout, int]]]) -> None:
        """Each level's layouts (poolPriority q -> the MILP's layouts on GPUs systems of priority q may use) onto
        such GPUs, lowest level first: a layout short there swaps with a GPU of the pool lent past q. The GPU
        given up is a surplus one, left blank or else lent above the highest priority (usable by the fewest
        lower levels), so no lower level loses a layout it needs."""
        for q, needed in levels:
            inside = [g for g in self.pool.free if g.usable_by(q)]
            outside = [g for g in self.pool.free if not g.usable_by(q)]
            have = Counter(self.chosen.get(g.index) for g in inside)
            for layout, count in sorted(needed.items()):
                while have[layout] < count:
                    donor = next(g for g in outside if self.chosen.get(g.index) == layout)
                    spare = max((g for g in inside if self._surplus(g, have, needed)),
                                key=lambda g: (g.index not in self.chosen,
                                               g.usable_above if g.usable_above is not None else -math.inf))
                    given = self.chosen.pop(spare.index, None)
                    self.blank.discard(spare.index)
                    del self.chosen[donor.index]
                    if given is not None:
                        self.chosen[donor.index] = given
                    self.chosen[spare.index] = layout
                    have[layout] += 1
                    have[given] -= 1

    def _surplus(self, gpu: PlannableGpu, have: Counter[Layout | None], needed: Mapping[Layout, int]) -> bool:
        """Whether a level has more GPUs of this GPU's layout than it needs (one left blank: always)."""
        layout = self.chosen.get(gpu.index)
        return layout is None or have[layout] > needed.get(layout, 0)

    def _take(self, gpu: PlannableGpu, layout: Layout, wanted: Counter[Layout]) -> None:
        self.chosen[gpu.index] = layout
        wanted[layout] -= 1


def assign_gpus(tasks: list[TaskPlan], pool: PoolGpus, layout_counts: list[tuple[Layout, int]],
                fixed_counts: Sequence[tuple[Layout, Layout, int]] = (), current: Plan | None = None,
                kept_nodes: Sequence[tuple[NodeGroup, int]] = (),
                restricted: Sequence[tuple[int, Mapping[Layout, int]]] = (),
                priorities: Mapping[str, int] = MappingProxyType({})) -> list[GpuPlan]:
    """`restricted`: the MILP's layouts on the GPUs each poolPriority may use (milp.restricted_counts);
    `priorities`: each system's poolPriority (0 where not given)."""
    chooser = _Chooser(pool, current)
    chooser.fixed(list(fixed_counts))
    chooser.free(layout_counts, kept_nodes)
    chooser.lend(restricted)
    gpus = {g.index: g for g in pool.gpus}
    slots = _filled(tasks, chooser, gpus, current, priorities)
    if slots is None and current is not None:
        # Replicas kept on their instances can fill what a lower priority needed: placed afresh they fit.
        slots = _filled(tasks, chooser, gpus, None, priorities)
    if slots is None:
        raise PlannerBug("replicas found no MIG instance: layout counts and replicas disagree")
    return [GpuPlan(index=i, node=gpus[i].node, device=gpus[i].device, layout=list(chooser.chosen[i]),
                    instances=slots[i]) for i in sorted(slots)]


def _filled(tasks: list[TaskPlan], chooser: _Chooser, gpus: Mapping[int, PlannableGpu], current: Plan | None,
            priorities: Mapping[str, int]) -> dict[int, list[InstancePlan]] | None:
    """Each chosen GPU's instances with the replicas placed (those of `current` kept where they run); None where
    some replica finds no instance."""
    waiting: dict[ConfigKey, deque[Replica]] = {}
    for task in tasks:
        for index, config in enumerate(task.configs):
            replicas = [(task.system, task.task, index)] * config.replicas
            waiting.setdefault(config_key(task, config), deque()).extend(replicas)

    slots: dict[int, list[InstancePlan]] = {
        index: [InstancePlan(mig_profile=name) for name, count in layout for _ in range(count)]
        for index, layout in chooser.chosen.items()
    }
    # Fixed GPUs: at most their usable instances (the rest are held by others).
    room = {index: Counter(dict(usable)) for index in slots if (usable := gpus[index].usable) is not None}
    if current:
        _keep_current_instances(slots, room, waiting, current, {chooser.key(g): g.index for g in gpus.values()},
                                gpus, priorities)
    by_profile: dict[str, list[Replica]] = {}
    for key, queued in waiting.items():
        by_profile.setdefault(key[3].mig_profile, []).extend(queued)
    # Lowest priority first, onto the GPUs every priority may use, then by threshold: the places a priority
    # may use come first, so where one is not usable, none left is.
    order = sorted(slots, key=lambda i: (gpus[i].usable_above is not None, gpus[i].usable_above or 0, i))
    free: dict[str, deque[tuple[int, int]]] = {}
    for index in order:
        for slot, instance in enumerate(slots[index]):
            if instance.config is None:
                free.setdefault(instance.mig_profile, deque()).append((index, slot))
    for profile, queue in by_profile.items():
        places = free.get(profile, deque())
        for replica in sorted(queue, key=lambda r: priorities.get(r[0], 0)):
            while places and not _has_room(room, places[0][0], profile):
                places.popleft()
            if not places or not gpus[places[0][0]].usable_by(priorities.get(replica[0], 0)):
                return None
            _place(slots, room, *places.popleft(), replica)
    return slots


def _has_room(room: dict[int, Counter[str]], index: int, profile: str) -> bool:
    return index not in room or room[index][profile] > 0


def _place(slots: dict[int, list[InstancePlan]], room: dict[int, Counter[str]], index: int, slot: int,
           replica: Replica) -> None:
    system, task, config = replica
    profile = slots[index][slot].mig_profile
    slots[index][slot] = InstancePlan(mig_profile=profile, system=system, task=task, config=config)
    if index in room:
        room[index][profile] -= 1


def _keep_current_instances(slots: dict[int, list[InstancePlan]], room: dict[int, Counter[str]],
                            waiting: dict[ConfigKey, deque[Replica]], current: Plan, index_of: dict[GpuKey, int],
                            gpus: Mapping[int, PlannableGpu], priorities: Mapping[str, int]) -> None:
    """A replica stays on the instance it runs on when that GPU keeps its layout."""
    current_tasks: dict[tuple[str | None, str | None], TaskPlan] = {(t.system, t.task): t for t in current.tasks}
    for gpu in current.gpus:
        index = index_of.get(gpu_key(gpu.node, gpu.device, gpu.index))
        if index not in slots or [i.mig_profile for i in gpu.instances] != [s.mig_profile for s in slots[index]]:
            continue
        for slot, instance in enumerate(gpu.instances):
            key = _config_key(current_tasks, instance)
            queue = waiting.get(key) if key else None
            if queue and _has_room(room, index, instance.mig_profile) \
                    and gpus[index].usable_by(priorities.get(queue[0][0], 0)):
                _place(slots, room, index, slot, queue.popleft())
