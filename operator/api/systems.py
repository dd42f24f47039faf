"""CompoundInferenceSystem objects as the operator's reconciler sees them (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessera.planner.model import SystemSpec
from tessera.planner.spec_file import SpecFileError, system_from_object

KIND = "CompoundInferenceSystem"
API_VERSION = "tessera.ai/v1alpha1"
PLURAL = "compoundinferencesystems"


@dataclass(frozen=True)
class SystemRef:
    namespace: str
    name: str
    uid: str
    generation: int
    kind: ClassVar[str] = KIND
    """The object's kind: what its children's ownerReferences and its Events name."""

    @property
    def key(self) -> str:
        """The object's name in the pool's plan: unique across namespaces."""
        return f"{self.namespace}/{self.name}"

    def owner_reference(self) -> dict:
        return {"apiVersion": API_VERSION, "kind": self.kind, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": False}


@dataclass
class SystemObject:
    ref: SystemRef
    spec: SystemSpec | None
    error: str | None
    status: dict
    annotations: dict[str, str]

    @property
    def valid(self) -> bool:
        return self.spec is not None


def read_system(obj: dict) -> SystemObject:
    """The object's spec as the planner's SystemSpec, named `<namespace>/<name>`, or the reason it is invalid."""
    metadata = obj["metadata"]
    ref = SystemRef(metadata["namespace"], metadata["name"], metadata["uid"], metadata.get("generation", 0))
    status = obj.get("status") or {}
    annotations = metadata.get("annotations") or {}
    try:
        spec = system_from_object({**obj, "metadata": {"name": metadata["name"]}}, "spec")
    except SpecFileError as error:
        return SystemObject(ref, None, str(error).removeprefix(f"spec ({ref.name}): "), status, annotations)
    return SystemObject(ref, spec.model_copy(update={"name": ref.key}), None, status, annotations)
