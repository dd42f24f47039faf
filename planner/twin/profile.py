"""Model profiles: per (base model, GPU) constants of the twin, kept as YAML data.

The memory model is fitted, not looked up: KV-cache tokens left at start-up are
``c0 - per_rank_slot * (max_loras * max_rank) - per_slot * max_loras``. vLLM
reserves every adapter slot at the maximum rank, so the LoRA buffers grow with
slots x max rank (the per-rank-slot slope is the LoRA bytes of one rank over
the KV bytes of one token: about 88 tokens for Qwen2.5-7B), plus a small
per-slot term (extra-vocabulary buffers; visible on Llama-3.1-8B).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.input_files import InputError, load_yaml, parse_yaml_documents, quote, validate

from .files import MAX_RANK, KvCapacityRow, Lengths, MemoryModel, Overhead, StepCoefficients, read_kv_rows

ALIASES = {
    "qwen": "qwen2.5-7b-instruct",
    "qwen-2.5-7b-instruct": "qwen2.5-7b-instruct",
    "qwen2.5-7b-instruct": "qwen2.5-7b-instruct",
    "llama": "llama-3.1-8b-instruct",
    "llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
}


class ServerProfile(BaseModel):
    """Constants of one LLM server (base model on a GPU) for the twin, as its profile file states them
    (``planner/twin/profiles/*.yaml`` or a path given as a workload's model); not the planner's per-variant
    latency Profile (tessera.planner.profiles)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    model: str = Field(min_length=1, max_length=256)
    gpu: str = Field(default="unknown", min_length=1, max_length=256)
    max_model_len: int = Field(ge=16, le=1 << 21, description="Longest sequence the server accepts, tokens.")
    block_size: int = Field(default=16, ge=1, le=256, description="KV block, tokens.")
    prealloc_blocks: int = Field(default=0, ge=0, le=1 << 20)
    step: StepCoefficients
    overhead: Overhead = Field(default_factory=Overhead)
    slot_fill: Literal["outside_batch", "set_order"] = Field(
        default="outside_batch",
        description="Which GPU slot a load evicts: the least recently used adapter outside the batch, or as vLLM "
                    "0.8.5 does, the least recently touched in one pass over the batch's adapters in their set's "
                    "order (it may evict an adapter of the batch, which is loaded again).")
    load_ms: dict[Annotated[int, Field(ge=1, le=MAX_RANK)], Annotated[float, Field(ge=0, le=1e5)]] = Field(
        min_length=1, max_length=64, description="Adapter load time (ms) by rank.")
    memory: MemoryModel
    lengths: Lengths = Field(default_factory=Lengths)

    # ---- memory model ----
    def kv_tokens(self, max_loras: int, max_rank: int) -> float:
        memory = self.memory
        return memory.c0 - memory.per_rank_slot * max_loras * max_rank - memory.per_slot * max_loras

    def kv_blocks(self, max_loras: int, max_rank: int) -> int:
        return max(0, int(self.kv_tokens(max_loras, max_rank)) // self.block_size)

    def refuses_to_start(self, max_loras: int, max_rank: int) -> bool:
        """vLLM refuses to start when the KV cache cannot hold one max-length sequence."""
        return self.kv_blocks(max_loras, max_rank) * self.block_size < self.max_model_len

    def load_time_ms(self, rank: int) -> float:
        ranks = sorted(self.load_ms)
        return float(np.interp(rank, ranks, [self.load_ms[r] for r in ranks]))

    def with_updates(self, **changes: Any) -> ServerProfile:
        """A copy with fields replaced, a section's given as the fields to replace in it
        (``step={"a_ms": 12.0}``, ``max_model_len=2048``), validated as a profile file is: a misspelt
        field or an out-of-range value raises."""
        data = self.model_dump()
        for name, value in changes.items():
            data[name] = {**data[name], **value} if isinstance(getattr(self, name), BaseModel) else value
        return ServerProfile.model_validate(data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.model_dump(), sort_keys=False))


def validate_profile(data: object, where: str) -> ServerProfile:
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a profile mapping (model, max_model_len, step, load_ms, memory), "
                         f"got {type(data).__name__}")
    return validate(ServerProfile, data, where)


def load_profile(name_or_path: str | Path) -> ServerProfile:
    """Load a shipped profile by model name (``qwen``, ``llama``...) or a YAML path (validated)."""
    p = Path(str(name_or_path))
    if p.suffix in (".yaml", ".yml"):
        return validate_profile(load_yaml(p), str(p))
    key = ALIASES.get(str(name_or_path).lower())
    if key is None:
        raise InputError(f"unknown profile {quote(str(name_or_path))}; expected a shipped one "
                         f"({', '.join(sorted(ALIASES))}) or a profile .yaml path")
    text = resources.files("tessera.planner.twin").joinpath(f"profiles/{key}.yaml").read_text()
    where = f"shipped profile {key}"
    (data,) = parse_yaml_documents(text, where)
    return validate_profile(data, where)


def read_kv_capacity(path: str | Path, model: str) -> list[KvCapacityRow]:
    """The rows of one model (by name or alias) in a kv_capacity CSV."""
    want = ALIASES.get(model.lower(), model.lower())
    return [row for row in read_kv_rows(path) if ALIASES.get(row.model.lower(), row.model.lower()) == want]


@dataclass(frozen=True)
class MemoryModelCheck:
    """A profile's memory model against measured start-ups: refusals to start and KV-cache error."""

    model: str
    configs: int
    refused_measured: int
    refused_predicted: int
    agree: int  # configurations whose refusal (or not) the model predicts
    median_error: float  # |predicted - measured| / measured KV tokens, over the started configurations
    max_error: float


def check_memory_model(profile: ServerProfile, rows: list[KvCapacityRow]) -> MemoryModelCheck:
    refused = [profile.refuses_to_start(row.max_loras, row.max_lora_rank) for row in rows]
    errors = [abs(profile.kv_tokens(row.max_loras, row.max_lora_rank) - row.gpu_kv_cache_tokens)
              / row.gpu_kv_cache_tokens for row in rows if row.gpu_kv_cache_tokens is not None]
    return MemoryModelCheck(
        model=profile.model, configs=len(rows), refused_measured=sum(row.gpu_kv_cache_tokens is None for row in rows),
        refused_predicted=sum(refused),
        agree=sum((row.gpu_kv_cache_tokens is None) == r for row, r in zip(rows, refused)),
        median_error=float(np.median(errors)) if errors else float("nan"),
        max_error=float(np.max(errors)) if errors else float("nan"))


def fit_memory_model(rows: list[KvCapacityRow]) -> MemoryModel:
    """Least squares of KV tokens on (1, slots x max rank, slots) over the started configurations."""
    started = [row for row in rows if row.gpu_kv_cache_tokens is not None]
    if len(started) < 3:
        raise ValueError("need at least 3 measured configurations to fit the memory model")
    design = np.array([[1.0, row.max_loras * row.max_lora_rank, row.max_loras] for row in started])
    tokens = np.array([row.gpu_kv_cache_tokens for row in started], dtype=float)
    c, *_ = np.linalg.lstsq(design, tokens, rcond=None)
    return MemoryModel(c0=round(float(c[0]), 1), per_rank_slot=round(float(-c[1]), 4),
                       per_slot=round(float(-c[2]), 4))
