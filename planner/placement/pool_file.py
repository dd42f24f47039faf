"""An AdapterPool object (YAML) as a placement problem.

Minimal on purpose: it reads the fields placement needs from the AdapterPool
wire format (camelCase, as issue 8's ``AdapterPoolSpec`` defines them) and
names the field of any error; validation of the whole object is the API
model's and the API server's job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tessera.planner.twin.profile import ALIASES

from .model import AdapterDemand, Placement, PlacementProblem, PoolLimits, ServerPlacement, ServiceBound


class PoolFileError(ValueError):
    """A malformed AdapterPool: the message names the field."""


def twin_profile_of(base_model_name: str, twin_profile: str | None) -> str:
    """The twin profile of a base model: the given one, or the one named like the model
    (``Qwen/Qwen2.5-7B-Instruct`` -> qwen2.5-7b-instruct)."""
    if twin_profile:
        return twin_profile
    key = base_model_name.rsplit("/", 1)[-1].lower()
    if key not in ALIASES:
        raise PoolFileError(f"spec.baseModel.twinProfile: no twin profile matches model {base_model_name!r}; "
                            f"name one of {sorted(set(ALIASES.values()))}")
    return ALIASES[key]


def _field(data: dict[str, Any], key: str, where: str, kind: Callable[[Any], Any] | None = None,
           default: Any = ...) -> Any:
    if key not in data or data[key] is None:
        if default is ...:
            raise PoolFileError(f"{where}.{key}: required")
        return default
    value = data[key]
    if kind is not None:
        try:
            value = kind(value)
        except (TypeError, ValueError):
            raise PoolFileError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}") from None
    return value


def problem_from_object(obj: dict[str, Any]) -> PlacementProblem:
    if not isinstance(obj, dict) or obj.get("kind") != "AdapterPool":
        raise PoolFileError("kind: expected an AdapterPool object")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PoolFileError("spec: required")
    base = spec.get("baseModel") or {}
    adapters = []
    for i, entry in enumerate(_field(spec, "adapters", "spec")):
        where = f"spec.adapters[{i}]"
        rate = _field(entry, "expectedRequestsPerSecond", where, float)
        rank = _field(entry, "rank", where, int)
        if rank < 1 or rate < 0:
            raise PoolFileError(f"{where}: rank must be >= 1 and expectedRequestsPerSecond >= 0")
        adapters.append(AdapterDemand(_field(entry, "name", where, str), rank, rate))
    names = [a.name for a in adapters]
    if len(set(names)) != len(names):
        raise PoolFileError("spec.adapters: adapter names repeat")
    bound = spec.get("serviceBound") or {}
    limits = spec.get("limits") or {}
    return PlacementProblem(
        adapters=tuple(adapters),
        model=twin_profile_of(_field(base, "name", "spec.baseModel", str), base.get("twinProfile")),
        bound=ServiceBound(_field(bound, "minServedFraction", "spec.serviceBound", float, None),
                           _field(bound, "p99TimeToFirstTokenMilliseconds", "spec.serviceBound", float, None)),
        limits=PoolLimits(_field(limits, "maxServers", "spec.limits", int, None),
                          _field(limits, "maxAdaptersPerServer", "spec.limits", int, None),
                          _field(limits, "maxLoraSlotsPerServer", "spec.limits", int, None)),
        max_model_len=_field(base, "maxModelLengthTokens", "spec.baseModel", int, None),
        name=(obj.get("metadata") or {}).get("name", "pool"), gpu=spec.get("gpuProduct"))


def load_problem(path: str | Path) -> PlacementProblem:
    try:
        obj = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as error:
        raise PoolFileError(f"{path}: not YAML: {error}") from None
    return problem_from_object(obj)


def load_previous_placement(path: str | Path) -> Placement:
    """The servers of an earlier `tessera place --output json|yaml` (its tessera placement): what
    re-placement needs of them is each server's index, adapters and two flags."""
    try:
        data = yaml.safe_load(Path(path).read_text())  # JSON is YAML
        servers = data["placement"]["servers"]
        return Placement(strategy=data["placement"]["strategy"], model=data["model"], servers=tuple(
            ServerPlacement(index=int(s["index"]), adapters=tuple(s["adapters"]), max_loras=int(s["max_loras"]),
                            max_lora_rank=int(s["max_lora_rank"]), rate_rps=float(s["rate_rps"]), starts=True,
                            predicted=None) for s in servers))
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as error:
        raise PoolFileError(f"{path}: not the output of `tessera place --output json|yaml`: {error!r}") from None
