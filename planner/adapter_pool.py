"""Domain model of an adapter pool: one base LLM serving many LoRA adapters.

The spec users write (the AdapterPool custom resource's `spec`). It carries
what the twin, the predictors and placement need (base model and its twin
profile, GPU product, per adapter its rank and expected rate, request
lengths, the per-adapter service bound and the limits) and what the operator
needs to run servers (serving image and arguments, weight sources pinned by
digest, the weight store's credentials). The operator never downloads
weights: servers fetch them and check the digest.

Python attributes are snake_case; the wire names (aliases) are camelCase
with units, as in planner/model.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from tessera.planner.model import (
    MAX_ARGS,
    MAX_ENV,
    MAX_LATENCY_MS,
    MAX_POOL_PRIORITY,
    MAX_RATE_RPS,
    MIN_POOL_PRIORITY,
    EnvVar,
    GpuProductName,
    Name,
    PrometheusQuery,
    Spec,
    cel,
    list_map,
)

MAX_ADAPTERS = 2000
MAX_LORA_RANK = 512  # the largest --max-lora-rank vLLM accepts
MAX_SERVERS = 256
WEIGHTS_URI = r"^(s3|gs|hf|https|oci|pvc)://[^\s]+$"
SHA256_DIGEST = r"^sha256:[0-9a-f]{64}$"


class WeightsSource(Spec):
    """Where a server fetches weights from, pinned by digest."""

    uri: str = Field(
        max_length=512, pattern=WEIGHTS_URI,
        description="Location of the weights' folder: https:// (a tar archive), s3:// (a prefix) or pvc://<claim>/<folder> (a PersistentVolumeClaim in the pool's namespace); gs://, hf:// and oci:// are not fetched yet (the pool is Invalid).",
    )
    digest: str = Field(
        max_length=71, pattern=SHA256_DIGEST,
        description="sha256:<64 hex> of the weights' folder, as `tessera weights digest` prints it (sha256 over sha256sum's lines of its files, sorted by path); the server pod's fetcher checks it, and a mismatch fails that adapter (or the base model's fetch), never loads other weights.",
    )


class SecretReference(Spec):
    name: Name = Field(description="Name of a Secret in the pool's namespace.")


class BaseModelSpec(Spec):
    """The base LLM every server of the pool runs."""

    name: str = Field(
        min_length=1, max_length=253,
        description="Model name the server announces and clients request, such as Qwen/Qwen2.5-7B-Instruct.",
    )
    twin_profile: str | None = Field(
        default=None, alias="twinProfile", max_length=253,
        description="The twin profile (calibrated step time and memory model) placement uses, such as qwen2.5-7b-instruct or llama-3.1-8b-instruct; default: the one matching `name`.",
    )
    image: str = Field(min_length=1, max_length=512, description="Container image of the LLM server (vLLM).")
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=MAX_ARGS,
        description="Extra server arguments. tessera sets --max-loras, --max-lora-rank and --max-model-len itself.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=MAX_ENV, json_schema_extra=list_map("name"),
        description="Extra environment variables of the server.",
    )
    max_model_len: int = Field(
        alias="maxModelLengthTokens", ge=256, le=1_048_576,
        description="Longest sequence (prompt + output) in tokens, 256-1048576; with the adapter slots, it sets the KV cache left.",
    )
    weights: WeightsSource = Field(description="The base model's weights.")


class Adapter(Spec):
    """One LoRA adapter of the pool."""

    name: Name = Field(description="Adapter name, a DNS-1035 label unique in the pool; clients request it as the model name.")
    rank: int = Field(ge=1, le=MAX_LORA_RANK, description="LoRA rank, 1-512.")
    weights: WeightsSource = Field(description="The adapter's weights.")
    rate_rps: float | None = Field(
        default=None, alias="expectedRequestsPerSecond", ge=0, le=MAX_RATE_RPS,
        description="Expected requests/s, in [0, 1e7]: the rate placed for when the pool has no demandSource, the prior until its first measurement when it has one.",
    )


class AdapterDemandQuery(PrometheusQuery):
    """A query giving every adapter's requests/s at once, one series per adapter."""

    adapter_label: str = Field(
        default="adapter", alias="adapterLabel", min_length=1, max_length=63,
        description="Label of each result series that holds the adapter's name.",
    )


class ServiceBound(Spec):
    """What each adapter is owed; placement packs servers only up to it."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("has(self.minServedFraction) || has(self.p99TimeToFirstTokenMilliseconds)",
            "give minServedFraction, p99TimeToFirstTokenMilliseconds or both"),
    ]})

    min_served_fraction: float | None = Field(
        default=None, alias="minServedFraction", gt=0, le=1,
        description="Least fraction of each adapter's requests served, in (0, 1]; guards against a cold adapter that is never scheduled.",
    )
    p99_ttft_ms: float | None = Field(
        default=None, alias="p99TimeToFirstTokenMilliseconds", gt=0, le=MAX_LATENCY_MS,
        description="Bound on each adapter's p99 time to first token, in ms, in (0, 3600000].",
    )

    @model_validator(mode="after")
    def _one_bound_given(self) -> "ServiceBound":
        if self.min_served_fraction is None and self.p99_ttft_ms is None:
            raise ValueError("give minServedFraction, p99TimeToFirstTokenMilliseconds or both")
        return self


class PoolLimits(Spec):
    """Caps placement respects, whatever the twin would allow."""

    max_servers: int = Field(
        default=16, alias="maxServers", ge=1, le=MAX_SERVERS,
        description="Most servers (one GPU each) the pool may use, 1-256; adapters that do not fit are reported in status.",
    )
    max_adapters_per_server: int | None = Field(
        default=None, alias="maxAdaptersPerServer", ge=1, le=MAX_ADAPTERS,
        description="Most adapters assigned to one server (kept loaded on it, swapped into slots on demand).",
    )
    max_lora_slots: int | None = Field(
        default=None, alias="maxLoraSlotsPerServer", ge=1, le=256,
        description="Cap on each server's adapter slots (vLLM --max-loras, A_max), 1-256; placement picks A_max at or below it.",
    )


class PickerPort(Spec):
    number: int = Field(ge=1, le=65535, description="The picker Service's port number, 1-65535.")


class EndpointPickerRef(Spec):
    """The endpoint picker the user runs for the pool's InferencePool (Gateway API Inference Extension)."""

    name: Name = Field(description="Name of the picker's Service in the pool's namespace.")
    port: PickerPort = Field(description="The picker Service's port.")
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose", alias="failureMode",
        description="What the Gateway does while the picker does not answer: FailClose refuses the request, FailOpen sends it to any of the pool's servers. Default: FailClose.",
    )


class AdapterPoolSpec(Spec):
    """A base LLM with its LoRA adapters, packed onto the fewest GPUs."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("has(self.demandSource) || self.adapters.all(a, has(a.expectedRequestsPerSecond))",
            "every adapter needs expectedRequestsPerSecond unless the pool has a demandSource", ".adapters"),
    ]})

    name: Name = Field(description="The pool's name (metadata.name in Kubernetes).")
    base_model: BaseModelSpec = Field(alias="baseModel", description="The base LLM.")
    gpu: GpuProductName = Field(alias="gpuProduct", description="GPU product of the pool's nodes; each server uses one whole GPU.")
    adapters: list[Adapter] = Field(
        max_length=MAX_ADAPTERS, json_schema_extra=list_map("name"),
        description="The LoRA adapters, at most 2000, names unique.",
    )
    demand_source: AdapterDemandQuery | None = Field(
        default=None, alias="demandSource",
        description="Optional Prometheus query for every adapter's requests/s; re-placed with hysteresis.",
    )
    mean_prompt_tokens: float | None = Field(
        default=None, alias="meanPromptTokens", ge=1, le=1_048_576,
        description="Mean prompt length in tokens; default: the twin profile's calibrated workload.",
    )
    mean_output_tokens: float | None = Field(
        default=None, alias="meanOutputTokens", ge=1, le=1_048_576,
        description="Mean output length in tokens; default: the twin profile's calibrated workload.",
    )
    service_bound: ServiceBound = Field(alias="serviceBound", description="The per-adapter service bound.")
    limits: PoolLimits = Field(default_factory=PoolLimits, description="Caps on servers and adapters per server.")
    pool_priority: int = Field(
        default=0, alias="poolPriority", ge=MIN_POOL_PRIORITY, le=MAX_POOL_PRIORITY,
        description="Rank in its GPU pool, in [-1000, 1000], in one order with the pool's compound systems' "
                    "poolPriority: a higher AdapterPool takes free GPUs first (a running server keeps its GPU); it "
                    "never takes GPUs the compound plan holds for a system of its priority or higher, and may "
                    "claim those held only by lower priorities; where every compound system of the pool has a "
                    "higher priority, they may take its GPUs and it is Degraded PreemptedByPriority, naming them. "
                    "Quotas come first; at equal priority what already runs keeps its GPUs.",
    )
    credentials_secret: SecretReference | None = Field(
        default=None, alias="credentialsSecretRef",
        description="Secret with the weight store's credentials (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL): the environment of the server pods' weight fetchers only, never vLLM's, never read by the operator.",
    )
    endpoint_picker: EndpointPickerRef | None = Field(
        default=None, alias="endpointPickerRef",
        description="The endpoint picker of the pool's InferencePool (inference.networking.k8s.io/v1), written only where the cluster has that CRD; without it no InferencePool is written.",
    )

    @model_validator(mode="after")
    def _adapters_unique_and_rated(self) -> "AdapterPoolSpec":
        seen: set[str] = set()
        for i, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise ValueError(f"adapters[{i}].name: duplicate adapter name {adapter.name!r}")
            seen.add(adapter.name)
            if adapter.rate_rps is None and self.demand_source is None:
                raise ValueError(
                    f"adapters[{i}].expectedRequestsPerSecond: required unless the pool has a demandSource")
        return self

    @property
    def max_rank(self) -> int:
        return max((a.rank for a in self.adapters), default=1)
