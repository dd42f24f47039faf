"""Make before break for serving nodes: re-partition a node whose GPUs serve without dropping what it carries.

A planned node whose layout must change while pods hold its GPUs
(decide_relabels leaves it with `blocked_by`) changes in steps, each decided
afresh from what one reconcile reads, so a restart resumes where the cluster
stands:

1. Never a node where a pod tessera does not own holds a GPU or a MIG
   instance: the API cannot show which GPU a pod holds. It stays `NodeInUse`,
   naming the pod.
2. It starts once the capacity it carries runs elsewhere where the plan
   allows: for each task with replicas on it, the plan's Deployments of that
   task on other nodes are available. Those on nodes that themselves wait to
   change do not count (they come after; counting them could make two nodes
   wait for each other). A task the plan puts on no other node has no
   replacement capacity: `--without-replacement wait` keeps the node serving
   (`NoReplacementCapacity`); `change` goes on, only while no other serving
   node of the pool changes, and states the replicas lost.
3. At most `--max-changing-nodes` serving nodes of a pool change at once; the
   nodes tessera cordoned count.
4. Cordon, recording that tessera did (annotation tessera.ai/cordoned; for a
   change without replacement capacity also the replicas it loses,
   tessera.ai/change-loss, which every later reconcile states), and
   scale the Deployments pinned to the node to zero (deleting their pods
   would only make their ReplicaSets recreate them). Once no pod holds its
   GPUs, decide_relabels relabels it; once its layout is applied,
   decide_children applies its Deployments and this lifts the cordon: only
   tessera's own, also when mig-manager failed or the plan no longer changes
   the node.

Pure: plain data in, states and actions out (the purity contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import Pool
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.actions import Action, CordonNode, Json, ScaleToZero, UncordonNode
from tessera.operator.reconcile.decide import ChildKey, NodeMig, available_now, is_model_server, task_of

Task = tuple[str, str, str]
"""(namespace, system label, task label), as decide.task_of reads it from a Deployment."""


@dataclass(frozen=True)
class Rules:
    """The settings this decision follows: --max-changing-nodes and --without-replacement."""

    max_changing: int = 1
    without_replacement: str = "change"


@dataclass(frozen=True)
class Capacity:
    """What a serving node carries, against what the plan runs elsewhere."""

    pending: list[str]
    """Planned Deployments elsewhere of the node's tasks that are not available yet."""
    missing: dict[Task, int]
    """Tasks the plan puts on no other node -> the replicas the node carries of them (lost while it changes)."""


def decide_serving_nodes(pool: Pool, states: dict[str, NodeMig], pods: Mapping[str, Mapping[str, str | None]],
                         live: Mapping[ChildKey, Json], planned: Iterable[Json], rules: Rules
                         ) -> tuple[dict[str, NodeMig], list[Action]]:
    """Each node's state with where its serving change stands, and the cordons, scale-downs and uncordons.

    `states` come from decide_relabels; `pods` are the GPU pods of the nodes to
    relabel (`namespace/name` -> the tessera Deployment it names, None for
    another's pod); `live` tessera's children; `planned` the plan's bodies.
    """
    states = dict(states)
    servers = [child for child in live.values() if is_model_server(child)]
    planned_servers = [body for body in planned if is_model_server(body)]
    actions: list[Action] = []
    in_progress = 0
    cordoned = {n.name: n.cordoned_for for n in pool.nodes if n.cordoned_for is not None}
    for node in sorted((n for n in pool.nodes if n.name in cordoned), key=lambda n: n.name):
        state = states.get(node.name)
        if state is None or state.applied or state.failed:
            why = ("its new layout is applied" if state is not None and state.applied
                   else "mig-manager failed; it keeps its layout" if state is not None else "the plan no longer uses it")
            actions.append(UncordonNode(node.name, builders.uncordon_ops(cordoned[node.name], node.change_loss is not None),
                                        reason=f"lift tessera's cordon: {why}"))
            continue
        in_progress += 1
        if state.waiting:
            continue  # a pause came meanwhile: nothing more changes what runs
        own = _pinned(servers, state.hostname)
        actions.extend(_scale_to_zero(own, node.name))
        unserved = _capacity(own, state.hostname, planned_servers, live, set()).missing
        # the loss the cordon recorded: once the Deployments are at zero they no longer show it
        loss = node.change_loss or (f"until then no other node serves {_tasks(unserved)}" if unserved else "")
        states[node.name] = replace(state, serving_change=(_draining(loss), (
            f"node {node.name} is cordoned by tessera for its new layout {state.config}: its Deployments are scaled "
            "to zero until mig-manager applies it, then they return" + (f"; {loss}" if loss else ""))))
    waiting_hosts = {m.hostname for m in states.values() if m.blocked_by}
    for name, state in sorted(states.items()):
        node = pool.node(name)
        if node.cordoned_for is not None or not state.blocked_by or state.waiting:
            continue  # changing already, nothing holds its GPUs, or held back (pause, maintenance window)
        own = _pinned(servers, state.hostname)
        names = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in own}
        foreign = [pod for pod, deployment in sorted(pods.get(name, {}).items())
                   if (pod.split("/")[0], deployment) not in names]
        if foreign:
            states[name] = replace(state, blocked_by=foreign)  # NodeInUse: never touched
            continue
        capacity = _capacity(own, state.hostname, planned_servers, live, waiting_hosts - {state.hostname})
        verdict = _verdict(name, state, capacity, in_progress, rules)
        if verdict is not None:
            states[name] = replace(state, serving_change=verdict)
            continue
        loss = _loss(capacity.missing)
        actions.append(CordonNode(name, builders.cordon_ops(state.config, loss or None), reason=(
            f"re-partition serving node {name} to {state.config}" + (f"; {loss}" if loss else
                                                                     "; what it carries runs elsewhere"))))
        actions.extend(_scale_to_zero(own, name))
        in_progress += 1
        states[name] = replace(state, serving_change=(_draining(loss), (
            f"node {name} is cordoned by tessera for its new layout {state.config}: its Deployments are scaled to "
            "zero until mig-manager applies it" + (f"; {loss}" if loss else ""))))
    return states, actions


def _verdict(name: str, state: NodeMig, capacity: Capacity, in_progress: int, rules: Rules
             ) -> tuple[str, str] | None:
    """Why the node may not start changing now, as (reason, message); None: it may."""
    if capacity.pending:
        return st.REPLACEMENT_PENDING, (f"node {name} changes to {state.config} once what it carries runs elsewhere: "
                                        f"waits for {_some(capacity.pending)} to be available")
    if capacity.missing and rules.without_replacement == "wait":
        return st.NO_REPLACEMENT_CAPACITY, (
            f"node {name} must change to {state.config}, but the plan puts {_tasks(capacity.missing)} on no other "
            "node: it keeps serving (--without-replacement wait); add a node, or set --without-replacement change")
    if capacity.missing and in_progress:
        return st.NODE_CHANGE_QUEUED, (f"node {name} changes to {state.config} without replacement capacity, so only "
                                       "while no other serving node of the pool changes")
    if in_progress >= rules.max_changing:
        return st.NODE_CHANGE_QUEUED, (f"node {name} waits to change to {state.config}: {in_progress} serving node(s) "
                                       f"of the pool change at once (--max-changing-nodes {rules.max_changing})")
    return None


def _capacity(own: list[Json], hostname: str, planned: list[Json], live: Mapping[ChildKey, Json],
              after: set[str]) -> Capacity:
    """The node's tasks against the plan's Deployments of them on other nodes (less those on nodes in `after`)."""
    carried: dict[Task, int] = {}
    for child in own:
        carried[task_of(child)] = carried.get(task_of(child), 0) + int(child["spec"].get("replicas") or 0)
    pending: list[str] = []
    missing: dict[Task, int] = {}
    for task, replicas in sorted(carried.items()):
        elsewhere = [body for body in planned if task_of(body) == task
                     and builders.pinned_hostname(body) not in (after | {hostname})]
        if not elsewhere:
            missing[task] = replicas
        pending += [body["metadata"]["name"] for body in elsewhere if not available_now(live.get(_key(body)), body)]
    return Capacity(sorted(pending), missing)


def _pinned(servers: list[Json], hostname: str) -> list[Json]:
    return sorted((c for c in servers if builders.pinned_hostname(c) == hostname), key=lambda c: c["metadata"]["name"])


def _scale_to_zero(own: list[Json], node: str) -> list[Action]:
    return [ScaleToZero(c["metadata"]["namespace"], c["metadata"]["name"], node, reason=f"node {node} is re-partitioned")
            for c in own if c["spec"].get("replicas")]


def _key(body: Json) -> ChildKey:
    return body["kind"], body["metadata"]["namespace"], body["metadata"]["name"]


def _draining(loss: str) -> str:
    """The reason of a change under way: a Warning where it carries a loss (no replacement capacity)."""
    return st.NODE_CHANGED_WITHOUT_REPLACEMENT if loss else st.NODE_DRAINING


def _loss(missing: dict[Task, int]) -> str:
    if not missing:
        return ""
    return ("without replacement capacity (--without-replacement change): "
            + ", ".join(f"{system}/{task} loses {n} replica(s)" for (_, system, task), n in sorted(missing.items()))
            + " until the node serves again")


def _tasks(missing: dict[Task, int]) -> str:
    return _some([f"{system}/{task}" for _, system, task in sorted(missing)])


def _some(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
