"""An AdapterPool file as a placement problem.

The object is validated by the API's own model (``AdapterPoolSpec``, the one the
CRD is generated from), by its camelCase wire names only, and read through the
project's bounded YAML loader: the command line accepts what the API server
accepts, and every error names the file and the field. ``problem_from_spec`` is
the one mapping from the API to the placement library's plain ``PlacementProblem``;
what that problem cannot express is refused there, naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tessera.planner.adapter_pool import MAX_ADAPTERS, AdapterPoolSpec
from tessera.planner.input_files import InputError, load_yaml, object_name_and_spec, quote, shorten, validate
from tessera.planner.predictors.workload_features import MODEL_IDS
from tessera.planner.twin.files import MAX_LORAS
from tessera.planner.twin.profile import ALIASES, load_profile
from tessera.planner.twin.workload import VLLM_MAX_LORA_RANKS, Workload

from .model import AdapterDemand, Placement, PlacementProblem, PoolLimits, ServerPlacement, ServiceBound

KIND = "AdapterPool"
# etcd's object size limit: every AdapterPool the API server can store (2000 adapters) fits.
MAX_POOL_BYTES = 1536 * 1024
# An earlier report lists every adapter once per strategy (tessera's and four baselines).
MAX_PREVIOUS_BYTES = 8 * 1024 * 1024
# The predictors and the twin check run the calibrated workload's request lengths; a pool's
# mean lengths are accepted within this share of them (the API example rounds them).
LENGTH_TOLERANCE = 0.05


class PoolFileError(InputError):
    """A malformed AdapterPool or one placement cannot express: the message names the file and the field."""


def twin_profile_of(base_model_name: str, twin_profile: str | None) -> str:
    """The twin profile of a base model: the given one, or the one named like the model
    (``Qwen/Qwen2.5-7B-Instruct`` -> qwen2.5-7b-instruct)."""
    if twin_profile:
        return twin_profile
    key = base_model_name.rsplit("/", 1)[-1].lower()
    if key not in ALIASES:
        raise PoolFileError(f"spec.baseModel.twinProfile: no twin profile matches model {quote(base_model_name)}; "
                            f"name one of {sorted(set(ALIASES.values()))}")
    return ALIASES[key]


def _checked_twin_profile(name: str) -> str:
    """The twin profile, refused here (naming the field) when it cannot be read or has no trained predictors."""
    try:
        profile = load_profile(name)
    except InputError as error:
        raise PoolFileError(f"spec.baseModel.twinProfile: {error}") from None
    if profile.model not in MODEL_IDS:
        raise PoolFileError(f"spec.baseModel.twinProfile: {quote(name)} is a profile of {quote(profile.model)}, "
                            f"which has no trained predictors; placement predicts {', '.join(MODEL_IDS)}")
    return name


def _require_calibrated_length(field: str, value: float | None, calibrated: float) -> None:
    if value is not None and abs(value - calibrated) > LENGTH_TOLERANCE * calibrated:
        raise PoolFileError(f"spec.{field}: {value:g} tokens; placement predicts only the calibrated workload's "
                            f"{calibrated:g} (within {LENGTH_TOLERANCE:.0%}): leave the field out or set it so")


def problem_from_spec(spec: AdapterPoolSpec) -> PlacementProblem:
    """The placement problem of an AdapterPool's spec: each adapter at its expected rate."""
    for index, adapter in enumerate(spec.adapters):
        if adapter.rate_rps is None:
            raise PoolFileError(f"spec.adapters[{index}].expectedRequestsPerSecond: placement needs every adapter's "
                                f"expected rate; a pool with only a demandSource is placed from its measurements "
                                f"by the operator")
    _require_calibrated_length("meanPromptTokens", spec.mean_prompt_tokens, Workload.mean_input)
    _require_calibrated_length("meanOutputTokens", spec.mean_output_tokens, Workload.mean_output)
    bound, limits = spec.service_bound, spec.limits
    return PlacementProblem(
        adapters=tuple(AdapterDemand(a.name, a.rank, float(a.rate_rps or 0.0)) for a in spec.adapters),
        model=_checked_twin_profile(twin_profile_of(spec.base_model.name, spec.base_model.twin_profile)),
        bound=ServiceBound(bound.min_served_fraction, bound.p99_ttft_ms),
        limits=PoolLimits(limits.max_servers, limits.max_adapters_per_server, limits.max_lora_slots),
        max_model_len=spec.base_model.max_model_len, name=spec.name, gpu=spec.gpu)


def spec_from_object(document: Any, where: str) -> AdapterPoolSpec:
    """The spec of an AdapterPool object, validated by the API's model under its wire names."""
    if not isinstance(document, dict):
        raise PoolFileError(f"{where}: expected an AdapterPool object (a mapping), got {type(document).__name__}")
    name, spec = object_name_and_spec(document, KIND, where, PoolFileError)
    if "name" in spec:  # not in the CRD: the API server refuses it too
        raise PoolFileError(f"{where} ({shorten(name)}): spec.name: unknown field; the pool's name is metadata.name")
    return validate(AdapterPoolSpec, {**spec, "name": name}, f"{where} ({shorten(name)})", "spec", PoolFileError,
                    by_alias=True, by_name=False)


def load_problem(path: str | Path) -> PlacementProblem:
    """The placement problem of the AdapterPool in a YAML file."""
    spec = spec_from_object(load_yaml(path, MAX_POOL_BYTES), str(path))
    try:
        return problem_from_spec(spec)
    except PoolFileError as error:
        raise PoolFileError(f"{path} ({shorten(spec.name)}): {error}") from None


class _PreviousServer(BaseModel):
    """What re-placement reads of one server of an earlier report (other keys are the report's own)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

    index: int = Field(ge=0)
    adapters: list[str] = Field(max_length=MAX_ADAPTERS)
    max_loras: int = Field(ge=1, le=MAX_LORAS)
    max_lora_rank: int
    rate_rps: float = Field(ge=0)

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, rank: int) -> int:
        if rank not in VLLM_MAX_LORA_RANKS:
            raise ValueError(f"{rank} is not a --max-lora-rank vLLM 0.8.5 starts with; expected one of "
                             f"{', '.join(map(str, VLLM_MAX_LORA_RANKS))}")
        return rank


class _PreviousPlacement(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    strategy: str = Field(max_length=64)
    servers: list[_PreviousServer] = Field(max_length=MAX_ADAPTERS)

    @model_validator(mode="after")
    def _each_server_and_adapter_once(self) -> "_PreviousPlacement":
        indices = [s.index for s in self.servers]
        names = [n for s in self.servers for n in s.adapters]
        if len(set(indices)) < len(indices):
            raise ValueError("servers: an index repeats; each server of a placement has its own")
        if len(set(names)) < len(names):
            raise ValueError("servers: an adapter is on two servers; a placement puts each on one")
        return self


class _PreviousReport(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = Field(max_length=256)
    placement: _PreviousPlacement


def load_previous_placement(path: str | Path) -> Placement:
    """The servers of an earlier `tessera place --output json|yaml` (its tessera placement): what
    re-placement needs of them is each server's index, adapters and two flags."""
    data = load_yaml(path, MAX_PREVIOUS_BYTES)  # JSON is YAML
    if not isinstance(data, dict):
        raise PoolFileError(f"{path}: not the output of `tessera place --output json|yaml` (a mapping), "
                            f"got {type(data).__name__}")
    report = validate(_PreviousReport, data, str(path), error_type=PoolFileError)
    return Placement(strategy=report.placement.strategy, model=report.model, servers=tuple(
        ServerPlacement(index=s.index, adapters=tuple(s.adapters), max_loras=s.max_loras, max_lora_rank=s.max_lora_rank,
                        rate_rps=s.rate_rps, starts=True, predicted=None) for s in report.placement.servers))
