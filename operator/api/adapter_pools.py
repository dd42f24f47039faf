"""AdapterPool objects as the operator's reconciler sees them (pure).

The spec is validated by the API's own model and mapped to the placement
problem by `tessera place`'s one mapping (planner/placement/pool_file.py), so
the operator refuses exactly what the command line refuses, naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessera.operator.api.systems import SystemRef
from tessera.planner.adapter_pool import AdapterPoolSpec
from tessera.planner.placement import PlacementProblem
from tessera.planner.placement.pool_file import PoolFileError, problem_from_spec, spec_from_object
from tessera.weights.fetch import unsupported_scheme

KIND = "AdapterPool"
PLURAL = "adapterpools"


@dataclass(frozen=True)
class PoolRef(SystemRef):
    """An AdapterPool's reference: a system's, under its own kind."""

    kind: ClassVar[str] = KIND


@dataclass(frozen=True)
class AdapterPoolObject:
    ref: PoolRef
    spec: AdapterPoolSpec | None
    problem: PlacementProblem | None
    """The placement problem; None with `error` for a spec the placement refuses."""
    error: str | None
    status: dict

    @property
    def valid(self) -> bool:
        return self.problem is not None


def with_prior_placeholders(spec: AdapterPoolSpec) -> AdapterPoolSpec:
    """A pool with a demandSource needs no expectedRequestsPerSecond: the rates it is placed for are decided from
    its readings (reconcile/adapter_pool_demand.py), so an adapter without a prior gets 0 here, replaced there."""
    if spec.demand_source is None:
        return spec
    adapters = [a if a.rate_rps is not None else a.model_copy(update={"rate_rps": 0.0}) for a in spec.adapters]
    return spec.model_copy(update={"adapters": adapters})


def unsupported_sources(spec: AdapterPoolSpec) -> str | None:
    """Why the pool's weights cannot reach its servers (a scheme tessera does not fetch yet), naming the field."""
    fields = [("spec.baseModel.weights.uri", spec.base_model.weights),
              *((f"spec.adapters[{i}].weights.uri", a.weights) for i, a in enumerate(spec.adapters))]
    for field, weights in fields:
        reason = unsupported_scheme(weights.uri)
        if reason is not None:
            return f"{field}: {reason}"
    return None


def read_adapter_pool(obj: dict) -> AdapterPoolObject:
    """The object's spec and placement problem, or the reason (with the field) the placement refuses it."""
    metadata = obj["metadata"]
    ref = PoolRef(metadata["namespace"], metadata["name"], metadata["uid"], metadata.get("generation", 0))
    status = obj.get("status") or {}
    prefix = f"spec ({ref.name}): "
    try:
        spec = spec_from_object({**obj, "metadata": {"name": metadata["name"]}}, "spec")
    except PoolFileError as error:
        return AdapterPoolObject(ref, None, None, str(error).removeprefix(prefix), status)
    try:
        problem = problem_from_spec(with_prior_placeholders(spec))
    except PoolFileError as error:
        return AdapterPoolObject(ref, spec, None, str(error).removeprefix(prefix), status)
    unsupported = unsupported_sources(spec)
    if unsupported is not None:
        return AdapterPoolObject(ref, spec, None, unsupported, status)
    return AdapterPoolObject(ref, spec, problem, None, status)
