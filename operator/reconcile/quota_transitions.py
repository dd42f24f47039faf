"""A make-before-break change inside a namespace's ResourceQuota on GPUs (issue 29 item 2).

A re-plan that moves replicas (a renamed Deployment, replicas moved to
another node) creates the new Deployments while the old ones serve until the
new are available (decide.replacements_awaited). The API server checks the
quota when a pod is created: where the old pods and the new ones together
exceed what the quota leaves tessera (quotas.quota_rooms), the new pods are
refused (FailedCreate) and the old ones would wait for them forever.

The rule, per namespace and GPU resource of a pod: where the old Deployments'
pods and the plan's Deployments' replicas together fit what the quota leaves,
nothing changes (make before break as usual). Where they do not, the change
moves one replica at a time, each step decided afresh from what one reconcile
reads (a restart resumes where the cluster stands):

1. The plan's Deployments are applied with the replicas they hold now, never
   more than planned; where the quota leaves room for one more pod, the first
   of them below its plan gets one more (the new one up), those on a node
   with instances free beside the old pods first: one pinned to a node whose
   instances the old pods hold would stay Pending, and the step wait for it
   forever.
2. Where there is no room and every one of them, and every old one, is
   available at the replicas it asks for with no pod going, the first old Deployment still holding pods is scaled down by one
   (the old one down): its pod goes and leaves room for the next step.
3. Otherwise a pod is starting or going: the step waits for it.

So at most one replica of the namespace's moving tasks is not serving at a
time, no pod is ever created past the quota, and the change ends when the
old Deployments hold no pods (until then they are not deleted, also where the
replacements make before break waits for are available: the step scales them
down, so a new pod is never created while a deleted one's pod still counts in
the quota): then the plan fits the quota (the solve kept it
within) and its Deployments are applied in full. The loss is stated:
reason `QuotaTransition`, naming the quota and the replicas that serve
meanwhile, and a Warning Event.

Pure: plain data in, steps out (the purity contract in pyproject.toml).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.systems import SystemObject
from tessera.operator.reconcile import builders
from tessera.operator.reconcile.actions import Action, ApplyChild, DeleteChild, Json, PostEvent, ScaleDeployment
from tessera.operator.reconcile.decide import ChildKey, is_model_server, owner_key
from tessera.operator.reconcile.quotas import REQUESTS, pod_gpu_requests, pods_held

QUOTA_TRANSITION = "QuotaTransition"
"""The condition reason of a system whose change moves one replica at a time inside a quota."""

Room = tuple[int, str]
"""What a namespace's tightest quota on a resource leaves tessera, and that quota for messages (quota_rooms)."""


@dataclass(frozen=True)
class QuotaStep:
    """One namespace's change on one GPU resource that the quota does not fit beside the old pods: its next step."""

    namespace: str
    resource: str
    """The pod's resource (`nvidia.com/mig-<profile>`, `nvidia.com/gpu`)."""
    source: str
    """The quota, for messages."""
    replicas: dict[str, int] = field(default_factory=dict)
    """The plan's Deployments (names) -> the replicas to apply now (fewer than planned while the change runs)."""
    scale_down: dict[str, int] = field(default_factory=dict)
    """Old Deployments (names) -> the replicas they keep after this step (one fewer than now)."""
    serving: int = 0
    """Replicas of the moving Deployments, old and new, available now."""
    planned: int = 0
    """Replicas the plan's Deployments of the namespace and resource want."""
    message: str = ""


def decide_quota_transitions(planned: Iterable[Json], stale: Iterable[Json], live: Mapping[str, Json],
                             rooms: Mapping[tuple[str, str], Room], behind: Collection[str] = ()) -> list[QuotaStep]:
    """The next step of each namespace's change that does not fit its quota beside the old pods.

    `planned`: the plan's model-server Deployments; `stale`: the live
    model-server Deployments no plan wants; `live`: tessera's live
    Deployments by `namespace/name`; `rooms`: quotas.quota_rooms; `behind`:
    the nodes whose instances the old pods hold
    (decide.hosts_without_room_beside_the_old), grown last.
    """
    groups: dict[tuple[str, str], tuple[list[Json], list[Json]]] = {}
    for body in planned:
        for resource in pod_gpu_requests(body):
            groups.setdefault((body["metadata"]["namespace"], resource), ([], []))[0].append(body)
    for child in stale:
        for resource in pod_gpu_requests(child):
            groups.setdefault((child["metadata"]["namespace"], resource), ([], []))[1].append(child)
    steps = []
    for (namespace, resource), (new, old) in sorted(groups.items()):
        room = rooms.get((namespace, REQUESTS + resource))
        if room is None or not any(pods_held(child) for child in old):
            continue
        step = _step(namespace, resource, room, _by_name(new), _by_name(old), live, behind)
        if step is not None:
            steps.append(step)
    return steps


def _step(namespace: str, resource: str, room: Room, new: list[Json], old: list[Json],
          live: Mapping[str, Json], behind: Collection[str]) -> QuotaStep | None:
    """The group's next step; None where the old pods and the plan's fit the quota together."""
    limit, source = room
    per_pod = {_name(body): pod_gpu_requests(body)[resource] for body in new + old}
    old_held = sum(pods_held(child) * per_pod[_name(child)] for child in old)
    if old_held + sum(_planned(body) * per_pod[_name(body)] for body in new) <= limit:
        return None
    current = {_name(body): live.get(_name(body)) for body in new}
    holds = {name: pods_held(child) if child is not None else 0 for name, child in current.items()}
    replicas = {_name(body): min(_planned(body), holds[_name(body)]) for body in new}
    free = limit - old_held - sum(holds[name] * per_pod[name] for name in holds)
    growing = next((body for body in sorted(new, key=lambda body: builders.pinned_hostname(body) in behind)
                    if replicas[_name(body)] < _planned(body)), None)
    scale_down: dict[str, int] = {}
    if growing is not None and free >= per_pod[_name(growing)]:
        replicas[_name(growing)] += 1  # the new one up
    elif all(_settled(current[_name(body)]) for body in new) and all(_settled(child) for child in old):
        shrinking = next((child for child in old if _replicas(child)), None)
        if shrinking is not None:
            scale_down[_name(shrinking)] = _replicas(shrinking) - 1  # the old one down
    serving = sum(_available(child) for child in old) + sum(_available(current[_name(b)]) for b in new)
    wanted = sum(_planned(body) for body in new)
    message = (f"{source} leaves tessera {limit} {REQUESTS}{resource}, and the change needs "
               f"{old_held} for the old pods beside {wanted} new: it moves one replica at a time (an old one "
               f"scaled down, then a new one up), so {serving} of the {wanted} planned replica(s) of "
               f"{_names(new)} serve meanwhile, at most one fewer than before")
    return QuotaStep(namespace, resource, source, replicas, scale_down, serving, wanted, message)


def step_children(planned: dict[ChildKey, tuple[Json, bool]], live: Mapping[ChildKey, Json],
                  rooms: Mapping[tuple[str, str], Room], systems: list[SystemObject], paused: Collection[str],
                  breaks: Collection[ChildKey], now: str, behind: Collection[str] = ()
                  ) -> tuple[dict[ChildKey, tuple[Json, bool]], list[Action], dict[str, str], set[ChildKey]]:
    """The planned children with the Deployments a quota step applies itself marked not to apply (decide_children
    then neither applies them in full nor takes them for gone: the old ones serve until they are available in
    full), and the step's writes: the plan's Deployments at the replicas of this step, the old one scaled down by
    one, and a Warning Event on each system a step moves; and each stepped system's key -> the step's message
    (with_quota_transition states it). A paused system's children take no step (nothing
    changes what runs), nor do `breaks`: the old Deployments whose replacements need their instances and the
    replacements held for them (decide.replacements_in_place, held_in_place), a break and not a make before
    break, which --without-replacement decides. Last, the old Deployments a step moves that still hold pods:
    not to be deleted (kept_while_stepped); `behind`: as decide_quota_transitions."""
    def takes_steps(key: ChildKey, child: Json) -> bool:
        return key not in breaks and is_model_server(child) and owner_key(child) not in paused
    stale_keys = [key for key, child in sorted(live.items()) if key not in planned and takes_steps(key, child)]
    stale = [live[key] for key in stale_keys]
    servers = [body for key, (body, _) in planned.items() if takes_steps(key, body)]
    by_name = {f"{namespace}/{name}": child for (kind, namespace, name), child in live.items() if kind == "Deployment"}
    by_key = {system.ref.key: system for system in systems}
    stepped = dict(planned)
    actions: list[Action] = []
    messages: dict[str, str] = {}
    holding: set[ChildKey] = set()
    for step in decide_quota_transitions(servers, stale, by_name, rooms, behind):
        holding |= {key for key in stale_keys if key[1] == step.namespace and pods_held(live[key])
                    and step.resource in pod_gpu_requests(live[key])}
        moves: list[Action] = []
        for name, replicas in sorted(step.replicas.items()):
            key: ChildKey = ("Deployment", *name.split("/", 1))  # type: ignore[assignment]
            body, ready = planned[key]
            stepped[key] = (body, False)
            now_applied = capped(body, replicas)
            if ready and builders.applied_hash(live.get(key) or {}) != builders.applied_hash(now_applied):
                moves.append(ApplyChild(now_applied, reason=step.message))
        for name, replicas in sorted(step.scale_down.items()):
            namespace, deployment = name.split("/", 1)
            moves.append(ScaleDeployment(namespace, deployment, replicas, reason=step.message))
        actions += moves
        owners = {owner_key(body) for body in servers if f"{body['metadata']['namespace']}/{body['metadata']['name']}"
                  in step.replicas}
        for owner in sorted(o for o in owners if o in by_key):
            messages[owner] = step.message
            if moves:
                actions.append(PostEvent(st.event_body(by_key[owner].ref, st.EventSpec(
                    "Warning", QUOTA_TRANSITION, step.message), now), reason=step.message))
    return stepped, actions, messages, holding


def kept_while_stepped(actions: list[Action], holding: Collection[ChildKey]) -> list[Action]:
    """The actions less the deletion of old Deployments a quota step moves while they hold pods, and of their
    PodDisruptionBudgets (decide_children deletes an old one once the replacements it waits for are available;
    the step scales it down to none first, and it goes once its pods are gone)."""
    names = {(namespace, name) for _, namespace, name in holding}
    return [action for action in actions if not (
        isinstance(action, DeleteChild) and (action.child["metadata"]["namespace"], action.child["metadata"]["name"])
        in names)]


def with_quota_transition(conditions: list[st.Condition], message: str | None) -> list[st.Condition]:
    """The system's conditions with its change's step stated where a quota steps it: Progressing, reason
    QuotaTransition, naming the quota and the replicas that serve meanwhile (instead of ReplacementPending)."""
    if message is None:
        return conditions
    return [c for c in conditions if c.type != st.PROGRESSING] + [
        st.Condition(st.PROGRESSING, True, QUOTA_TRANSITION, message)]


def capped(body: Json, replicas: int) -> Json:
    """The plan's Deployment with the replicas a step applies now, its applied hash stamped afresh."""
    if body["spec"]["replicas"] == replicas:
        return body
    body = copy.deepcopy(body)
    body["spec"]["replicas"] = replicas
    del body["metadata"]["annotations"][naming.APPLIED_HASH]
    return builders.with_applied_hash(body)


def _settled(child: Json | None) -> bool:
    """Every replica the Deployment asks for is available and no other pod of it runs (none starts or goes)."""
    if child is None:
        return True
    status = child.get("status") or {}
    return ((status.get("observedGeneration") or 0) >= (child["metadata"].get("generation") or 0)
            and (status.get("availableReplicas") or 0) >= _replicas(child)
            and (status.get("replicas") or 0) <= _replicas(child))


def _available(child: Json | None) -> int:
    return int(((child or {}).get("status") or {}).get("availableReplicas") or 0)


def _replicas(child: Json) -> int:
    return int(child["spec"].get("replicas") or 0)


def _planned(body: Json) -> int:
    return int(body["spec"]["replicas"])


def _name(body: Json) -> str:
    return f"{body['metadata']['namespace']}/{body['metadata']['name']}"


def _by_name(bodies: list[Json]) -> list[Json]:
    return sorted(bodies, key=_name)


def _names(bodies: list[Json], shown: int = 3) -> str:
    names = [body["metadata"]["name"] for body in bodies]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
