"""What a reconcile decides to write: plain values, each with the reason it is taken.

decide.py returns them, act.py applies them; nothing here calls the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
"""An object as the API server returns it, or a body tessera writes."""


@dataclass(frozen=True)
class StorePlan:
    """Write the pool's plan ConfigMap (its inputs' hash, the plan, kept shares, known-invalid systems)."""

    pool: str
    data: dict[str, str]
    reason: str


@dataclass(frozen=True)
class DeletePlan:
    """Remove the pool's plan ConfigMap: no system plans on the pool any more."""

    pool: str
    reason: str


@dataclass(frozen=True)
class WriteMigConfigs:
    """Merge tessera's mig-parted configs into the ConfigMap mig-manager reads, stamping when each was added."""

    namespace: str
    name: str
    data: dict[str, str]
    stamps: dict[str, str | None]
    exists: bool
    reason: str


@dataclass(frozen=True)
class LabelNode:
    """Ask mig-manager for a node's MIG config (one patch that also removes the state label)."""

    node: str
    config: str
    patch: Json
    reason: str


@dataclass(frozen=True)
class CordonNode:
    """Cordon a serving node before re-partitioning it, recording that tessera did (builders.cordon_ops); only
    while it is not cordoned: an admin's cordon that came after tessera read the node is never claimed."""

    node: str
    ops: list[Json]
    reason: str


@dataclass(frozen=True)
class UncordonNode:
    """Lift tessera's own cordon of a node and its record (builders.uncordon_ops); never an admin's cordon: the
    JSON patch's test lets it through only while tessera's record still names the config it was read with."""

    node: str
    ops: list[Json]
    reason: str


@dataclass(frozen=True)
class ScaleToZero:
    """Scale a model-server Deployment pinned to a node being re-partitioned to zero (its pods go, the Deployment
    stays: deleting pods would only make its ReplicaSet recreate them)."""

    namespace: str
    name: str
    node: str
    """The node it is pinned to: a cordon of it the API server refused leaves the Deployment serving."""
    reason: str


@dataclass(frozen=True)
class ScaleDeployment:
    """Set a model-server Deployment no plan wants to fewer replicas: one step of a change a quota does not fit
    beside the old pods (quota_transitions.py)."""

    namespace: str
    name: str
    replicas: int
    reason: str


@dataclass(frozen=True)
class RecordMigFailure:
    """Write (or, with None, remove) tessera's record of a node's mig-manager `failed` (a node annotation)."""

    node: str
    record: str | None
    reason: str


@dataclass(frozen=True)
class ApplyChild:
    """Server-side apply of a Service or Deployment."""

    body: Json
    reason: str

    @property
    def kind(self) -> str:
        return str(self.body["kind"])


@dataclass(frozen=True)
class DeleteChild:
    """Delete a child no plan wants (only the very object seen)."""

    child: Json
    reason: str


@dataclass(frozen=True)
class PatchStatus:
    """Write a system's (or an AdapterPool's) status."""

    namespace: str
    name: str
    status: Json
    reason: str
    plural: str = "compoundinferencesystems"
    """The kind's plural: a CompoundInferenceSystem's or an AdapterPool's status."""


@dataclass(frozen=True)
class PostEvent:
    """Post an Event about a decision (a condition changed, or the plan)."""

    body: Json
    reason: str


@dataclass(frozen=True)
class LoadAdapter:
    """Ask one AdapterPool server pod's fetcher sidecar to fetch a LoRA adapter's files and check their digest
    (`POST /v1/fetch`), then its vLLM to register it (`POST /v1/load_lora_adapter`)."""

    url: str
    pod: str
    adapter: str
    path: str
    fetch_url: str
    uri: str
    digest: str
    reason: str
    replace: bool = False
    """The server lists a copy of another (or an unknown) source: unload it first (`/v1/unload_lora_adapter`)."""


@dataclass(frozen=True)
class UnloadAdapter:
    """Ask one AdapterPool server pod's vLLM to drop an adapter no longer placed on its server
    (`POST /v1/unload_lora_adapter`), once the adapter's route no longer lists the pod."""

    url: str
    pod: str
    adapter: str
    reason: str


@dataclass(frozen=True)
class PatchPodStatus:
    """A strategic-merge patch of a pod's status subresource: its readiness gate condition (merged by type with
    the kubelet's) and tessera's annotation (the status subresource keeps the spec as it is, not the metadata)."""

    namespace: str
    name: str
    patch: Json
    reason: str


Action = (StorePlan | DeletePlan | WriteMigConfigs | LabelNode | CordonNode | UncordonNode | ScaleToZero | ScaleDeployment
          | RecordMigFailure | ApplyChild | DeleteChild | PatchStatus | PostEvent | LoadAdapter | UnloadAdapter
          | PatchPodStatus)
