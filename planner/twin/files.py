"""The twin's input files, one validated schema each: workloads, the sections of a model profile
(the profile itself is tessera.planner.twin.profile.ServerProfile), kv-capacity CSVs.

Every number is finite and inside a stated physical range (in the field's
description), and a workload's expected work is bounded: simulated duration
and arrivals have limits, stated in the message when exceeded, so that no
file makes the twin run for hours or hold gigabytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from tessera.planner.input_files import InputError, csv_records, load_yaml, validate

from .workload import MAX_PROMPT, MAX_TOTAL, VLLM_MAX_LORA_RANKS, Workload, server_max_lora_rank

MAX_DURATION_S = 24 * 3600.0
MAX_ARRIVALS = 2_000_000
MAX_ADAPTERS = 4096
MAX_RANK = 512
MAX_RATE_RPS = 1000.0
MAX_LORAS = 4096


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


Rank = Annotated[int, Field(ge=1, le=MAX_RANK, description=f"LoRA rank, 1..{MAX_RANK}.")]
Rate = Annotated[float, Field(ge=0, le=MAX_RATE_RPS, description=f"Requests/s of one adapter, 0..{MAX_RATE_RPS:g}.")]


class AdapterEntry(_File):
    rank: Rank
    rate: Rate


class AdapterCycle(_File):
    """`count` adapters whose ranks and rates cycle through the lists given."""

    count: int = Field(ge=1, le=MAX_ADAPTERS, description=f"Adapters, 1..{MAX_ADAPTERS}.")
    ranks: list[Rank] = Field(min_length=1, max_length=MAX_ADAPTERS)
    rates: list[Rate] = Field(min_length=1, max_length=MAX_ADAPTERS)


class WorkloadFile(_File):
    """A twin workload file (`tessera twin run|predict FILE`)."""

    model: str = Field(default="qwen", min_length=1, max_length=256,
                       description="Shipped profile name (qwen, llama) or a profile YAML path.")
    max_loras: int = Field(ge=1, le=MAX_LORAS, description=f"GPU adapter slots (A_max), 1..{MAX_LORAS}.")
    max_rank: int | None = Field(default=None, ge=1, le=MAX_RANK,
                                 description=f"--max-lora-rank of the server, one of {VLLM_MAX_LORA_RANKS} (vLLM "
                                             f"0.8.5's); default: the smallest of them at or above every adapter's rank.")
    duration_s: float = Field(default=3600.0, gt=0, le=MAX_DURATION_S,
                              description=f"Simulated seconds, up to {MAX_DURATION_S:g} (one day).")
    n_arrivals: int | None = Field(default=None, ge=0, le=MAX_ARRIVALS,
                                   description=f"Replay exactly this many arrivals, up to {MAX_ARRIVALS}.")
    outstanding_cap: int = Field(default=10**9, ge=1, le=10**9, description="Client cap on outstanding requests.")
    max_num_seqs: int = Field(default=2048, ge=1, le=65536, description="vLLM --max-num-seqs.")
    max_num_batched_tokens: int = Field(default=2048, ge=1, le=1 << 20, description="vLLM --max-num-batched-tokens.")
    mean_input: float = Field(default=222.8, ge=4, le=MAX_PROMPT, description=f"Mean prompt tokens, 4..{MAX_PROMPT}.")
    mean_output: float = Field(default=199.9, ge=1, le=MAX_TOTAL - 4,
                               description=f"Mean output tokens, 1..{MAX_TOTAL - 4}.")
    adapters: Annotated[
        Union[Annotated[list[AdapterEntry], Field(min_length=1, max_length=MAX_ADAPTERS), Tag("list")],
              Annotated[AdapterCycle, Tag("cycle")]],
        Discriminator(lambda value: "cycle" if isinstance(value, (dict, AdapterCycle)) else "list"),
    ] = Field(description="A list of {rank, rate}, or {count, ranks: [...], rates: [...]} (cyclic).")

    @model_validator(mode="after")
    def _work_is_bounded(self) -> "WorkloadFile":
        if self.max_rank is not None and self.max_rank not in VLLM_MAX_LORA_RANKS:
            raise ValueError(f"max_rank {self.max_rank} is not a --max-lora-rank vLLM 0.8.5 starts with; "
                             f"expected one of {', '.join(map(str, VLLM_MAX_LORA_RANKS))}")
        if self.max_rank is not None and self.max_rank < int(self.ranks().max()):
            raise ValueError(f"max_rank {self.max_rank} is below the largest adapter rank {int(self.ranks().max())}")
        total = float(self.rates().sum())
        if total <= 0:
            raise ValueError("adapters: every rate is 0; expected at least one adapter with a rate above 0")
        problem = self.arrivals_over_limit(self.duration_s) if self.n_arrivals is None else None
        if problem:
            raise ValueError(f"adapters: {problem}")
        return self

    def arrivals_over_limit(self, duration_s: float) -> str | None:
        """What is wrong when a simulation of `duration_s` expects more arrivals than the limit."""
        total = float(self.rates().sum())
        expected = total * duration_s
        if expected <= MAX_ARRIVALS:
            return None
        return (f"expected arrivals (total rate {total:.4g}/s x {duration_s:g} s) are {expected:.3g}, over the "
                f"limit of {MAX_ARRIVALS}: shorten duration_s or lower the rates")

    def server_max_rank(self) -> int:
        """The server's --max-lora-rank: the one given, else the one its adapters need."""
        return self.max_rank or server_max_lora_rank(int(self.ranks().max()))

    def ranks(self) -> np.ndarray:
        if isinstance(self.adapters, AdapterCycle):
            cycle = self.adapters
            return np.array([cycle.ranks[i % len(cycle.ranks)] for i in range(cycle.count)])
        return np.array([a.rank for a in self.adapters])

    def rates(self) -> np.ndarray:
        if isinstance(self.adapters, AdapterCycle):
            cycle = self.adapters
            return np.array([cycle.rates[i % len(cycle.rates)] for i in range(cycle.count)], dtype=float)
        return np.array([a.rate for a in self.adapters], dtype=float)

    def workload(self) -> Workload:
        return Workload(ranks=self.ranks(), rates=self.rates(), duration_s=self.duration_s,
                        n_arrivals=self.n_arrivals, mean_input=self.mean_input, mean_output=self.mean_output)


def load_workload_file(path: str | Path) -> WorkloadFile:
    """A workload file, validated; errors name the file and the field."""
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping with max_loras and adapters, got {type(data).__name__}")
    return validate(WorkloadFile, data, str(path))


# ---- model profiles -------------------------------------------------------------------------

class LoraGrid(_File):
    """The LoRA kernels' thread blocks per slot and layer, by the model's LoRA layers (vLLM 0.8.5,
    vllm/lora/ops/triton_ops): the shrink kernel's grow with each 16 of max rank, the expand kernel's do not,
    so the share of the LoRA cost that grows with rank depends on the step's tokens."""

    shrink_slices: int = Field(ge=1, le=1024, description="Slices the shrink kernel runs per layer (q, k, v, o, "
                                                          "gate, up, down: 7), 1..1024.")
    expand_tiles: int = Field(ge=1, le=1 << 20, description="Output tiles of 128 the expand kernel launches per "
                                                            "layer and 64 tokens, summed over its calls, 1..1048576.")


class StepCoefficients(_File):
    """step_ms = (a + b x decoding + c x prefill tokens) x (lora_c0 + lora_c1 x adapters in the batch)."""

    a_ms: float = Field(ge=0.1, le=1e4, description="Fixed step time, 0.1..10000 ms.")
    b_ms: float = Field(ge=0, le=1e3, description="Per decoding request, 0..1000 ms.")
    c_ms: float = Field(default=0.0, ge=0, le=1e3, description="Per prefill token, 0..1000 ms.")
    lora_c0: float = Field(ge=0.01, le=100, description="LoRA multiplier at no adapter, 0.01..100.")
    lora_c1: float = Field(ge=0, le=100, description="LoRA multiplier per adapter in the batch, 0..100.")
    slot_ms: float = Field(default=0.0, ge=0, le=100,
                           description="Per adapter slot (--max-loras + 1) per step at max rank <= 16, 0..100 ms.")
    slot_rank_share: float = Field(default=0.0, ge=0, le=1,
                                   description="Share of the per-slot cost that grows with each 16 of max rank, 0..1.")
    lora_grid: LoraGrid | None = Field(
        default=None, description="The LoRA kernels' grid: the per-slot cost grows with max rank by its shrink "
                                  "kernel's share of the blocks in each step; none: by slot_rank_share.")

    @model_validator(mode="after")
    def _one_rank_rule(self) -> StepCoefficients:
        if self.lora_grid is not None and self.slot_rank_share > 0:
            raise ValueError("slot_rank_share and lora_grid both say how the per-slot cost grows with max rank: set one")
        return self


class Overhead(_File):
    """Scheduler time per step beside the step's compute: fixed, per running and per waiting request."""

    c0_ms: float = Field(default=0.0, ge=0, le=1e3, description="Scheduler overhead per step, 0..1000 ms.")
    run_ms: float = Field(default=0.0, ge=0, le=1e3, description="Per running request, 0..1000 ms.")
    wait_ms: float = Field(default=0.0, ge=0, le=1e3, description="Per waiting request, 0..1000 ms.")
    wait_counts: Literal["all", "skipped"] = Field(
        default="all", description="Which waiting requests cost wait_ms: all, or those the adapter rule skips.")


class MemoryModel(_File):
    """KV-cache tokens = c0 - per_rank_slot x (max_loras x max rank) - per_slot x max_loras."""

    c0: float = Field(gt=0, le=1e9, description="KV tokens with no LoRA buffers, up to 1e9.")
    per_rank_slot: float = Field(ge=0, le=1e6, description="KV tokens one rank of one slot takes, 0..1e6.")
    per_slot: float = Field(ge=-1e6, le=1e6, description="KV tokens one slot takes beside its ranks (fitted; may be < 0).")


class Lengths(_File):
    """Request lengths the twin draws: lognormal, some stopping early."""

    eos_fraction: float = Field(default=0.0, ge=0, le=1, description="Share of requests stopping early, 0..1.")
    sigma: float = Field(default=0.6, gt=0, le=3, description="Lognormal shape of request lengths, (0, 3].")


# ---- kv_capacity CSV ------------------------------------------------------------------------

KV_COLUMNS = ("model", "max_loras", "max_lora_rank", "gpu_kv_cache_tokens")


class KvCapacityRow(_File):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

    model: str = Field(min_length=1, max_length=256)
    max_loras: int = Field(ge=1, le=MAX_LORAS)
    max_lora_rank: int = Field(ge=1, le=MAX_RANK)
    gpu_kv_cache_tokens: float | None = Field(ge=0, le=1e9, description="Empty when the engine refused to start.")


def read_kv_rows(path: str | Path) -> list[KvCapacityRow]:
    rows = []
    for line, record in csv_records(path, KV_COLUMNS):
        cells: dict[str, str | None] = {k: (v.strip() if isinstance(v, str) else v) for k, v in record.items()}
        cells["gpu_kv_cache_tokens"] = cells["gpu_kv_cache_tokens"] or None
        rows.append(validate(KvCapacityRow, cells, f"{path}:{line}"))
    return rows
