"""Place the solved layout counts on concrete GPUs and replicas on MIG instances.

The MILP decides how many GPUs use each layout; this cheap step decides which
GPU gets which, keeping every GPU whose current layout is still wanted (a
re-partition stops its pods) and every replica on the instance it already has.
"""

from __future__ import annotations

from collections import Counter, deque

from tessera.planner.catalog import Layout
from tessera.planner.plan import ConfigPlan, GpuPlan, InstancePlan, Plan, TaskPlan

ConfigKey = tuple  # (system, task, variant, segment, batch)


def layout_of(gpu: GpuPlan) -> Layout:
    return tuple(sorted((name, count) for name, count in gpu.layout))


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


def _config_key(tasks_by_key: dict, instance: InstancePlan) -> ConfigKey | None:
    if instance.config is None:
        return None
    task = tasks_by_key[(instance.system, instance.task)]
    return config_key(task, task.configs[instance.config])


def _choose_gpu_indices(layout_counts: list[tuple[Layout, int]], pool_gpus: int,
                        current: Plan | None) -> dict[int, Layout]:
    wanted = Counter(dict(layout_counts))
    chosen: dict[int, Layout] = {}
    current_gpus = sorted(current.gpus, key=lambda g: g.index) if current else []
    for gpu in current_gpus:
        layout = layout_of(gpu)
        if wanted[layout] > 0 and gpu.index < pool_gpus:
            chosen[gpu.index] = layout
            wanted[layout] -= 1
    busy_before = {g.index for g in current_gpus}
    free = [i for i in range(pool_gpus) if i not in chosen and i not in busy_before]
    free += [i for i in range(pool_gpus) if i not in chosen and i in busy_before]
    for layout, count in sorted(wanted.items()):
        for _ in range(count):
            chosen[free.pop(0)] = layout
    return chosen


def assign_gpus(tasks: list[TaskPlan], pool_gpus: int,
                layout_counts: list[tuple[Layout, int]], current: Plan | None = None) -> list[GpuPlan]:
    chosen = _choose_gpu_indices(layout_counts, pool_gpus, current)
    waiting: dict[ConfigKey, deque] = {}
    for task in tasks:
        for index, config in enumerate(task.configs):
            replicas = [(task.system, task.task, index)] * config.replicas
            waiting.setdefault(config_key(task, config), deque()).extend(replicas)

    slots: dict[int, list[InstancePlan]] = {
        index: [InstancePlan(mig_profile=name) for name, count in layout for _ in range(count)]
        for index, layout in chosen.items()
    }
    if current:
        _keep_current_instances(slots, waiting, current)
    by_profile: dict[str, deque] = {}
    for key, queue in waiting.items():
        by_profile.setdefault(key[3].mig_profile, deque()).extend(queue)
    for index in sorted(slots):
        for slot, instance in enumerate(slots[index]):
            queue = by_profile.get(instance.mig_profile)
            if instance.config is None and queue:
                system, task, config = queue.popleft()
                slots[index][slot] = InstancePlan(mig_profile=instance.mig_profile, system=system, task=task, config=config)
    leftover = sum(len(q) for q in by_profile.values())
    if leftover:
        raise AssertionError(f"{leftover} replicas found no MIG instance: layout counts and replicas disagree")
    return [GpuPlan(index=i, layout=list(chosen[i]), instances=slots[i]) for i in sorted(slots)]


def _keep_current_instances(slots: dict[int, list[InstancePlan]], waiting: dict[ConfigKey, deque],
                            current: Plan) -> None:
    """A replica stays on the instance it runs on when that GPU keeps its layout."""
    current_tasks = {(t.system, t.task): t for t in current.tasks}
    for gpu in current.gpus:
        kept = gpu.index in slots and \
            [i.mig_profile for i in gpu.instances] == [s.mig_profile for s in slots[gpu.index]]
        if not kept:
            continue
        for slot, instance in enumerate(gpu.instances):
            key = _config_key(current_tasks, instance)
            queue = waiting.get(key) if key else None
            if queue:
                system, task, config = queue.popleft()
                slots[gpu.index][slot] = InstancePlan(
                    mig_profile=instance.mig_profile, system=system, task=task, config=config)
