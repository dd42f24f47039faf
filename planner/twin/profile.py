"""Model profiles: per (base model, GPU) constants of the twin, kept as YAML data.

The memory model is fitted, not looked up: KV-cache tokens left at start-up are
``c0 - per_rank_slot * (max_loras * max_rank) - per_slot * max_loras``. vLLM
reserves every adapter slot at the maximum rank, so the LoRA buffers grow with
slots x max rank (the per-rank-slot slope is the LoRA bytes of one rank over
the KV bytes of one token: about 88 tokens for Qwen2.5-7B), plus a small
per-slot term (extra-vocabulary buffers; visible on Llama-3.1-8B).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tessera.planner.input_files import InputError, parse_yaml_documents, quote

from .files import ProfileFile, load_profile_file, read_kv_rows, validate_profile

ALIASES = {
    "qwen": "qwen2.5-7b-instruct",
    "qwen-2.5-7b-instruct": "qwen2.5-7b-instruct",
    "qwen2.5-7b-instruct": "qwen2.5-7b-instruct",
    "llama": "llama-3.1-8b-instruct",
    "llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
}


@dataclass
class ServerProfile:
    """Constants of one LLM server (base model on a GPU) for the twin; not the planner's
    per-variant latency Profile (tessera.planner.profiles)."""

    model: str
    gpu: str
    max_model_len: int
    block_size: int
    prealloc_blocks: int
    step: dict[str, float]
    overhead: dict[str, float]
    load_ms: dict[int, float]
    memory: dict[str, float]
    lengths: dict[str, float] = field(default_factory=dict)

    # ---- memory model ----
    def kv_tokens(self, max_loras: int, max_rank: int) -> float:
        m = self.memory
        return m["c0"] - m["per_rank_slot"] * max_loras * max_rank - m["per_slot"] * max_loras

    def kv_blocks(self, max_loras: int, max_rank: int) -> int:
        return max(0, int(self.kv_tokens(max_loras, max_rank)) // self.block_size)

    def refuses_to_start(self, max_loras: int, max_rank: int) -> bool:
        """vLLM refuses to start when the KV cache cannot hold one max-length sequence."""
        return self.kv_blocks(max_loras, max_rank) * self.block_size < self.max_model_len

    def load_time_ms(self, rank: int) -> float:
        ranks = sorted(self.load_ms)
        vals = [self.load_ms[r] for r in ranks]
        return float(np.interp(rank, ranks, vals))

    def with_updates(self, **sections: dict[str, float]) -> "ServerProfile":
        p = copy.deepcopy(self)
        for name, upd in sections.items():
            getattr(p, name).update(upd)
        return p

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "gpu": self.gpu, "max_model_len": self.max_model_len,
            "block_size": self.block_size, "prealloc_blocks": self.prealloc_blocks,
            "step": dict(self.step), "overhead": dict(self.overhead),
            "load_ms": {int(k): float(v) for k, v in self.load_ms.items()},
            "memory": dict(self.memory), "lengths": dict(self.lengths),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def _from_file(f: ProfileFile) -> ServerProfile:
    return ServerProfile(
        model=f.model, gpu=f.gpu, max_model_len=f.max_model_len, block_size=f.block_size,
        prealloc_blocks=f.prealloc_blocks, step=f.step.model_dump(), overhead=f.overhead.model_dump(),
        load_ms=dict(f.load_ms), memory=f.memory.model_dump(), lengths=f.lengths.model_dump(),
    )


def load_profile(name_or_path: str | Path) -> ServerProfile:
    """Load a shipped profile by model name (``qwen``, ``llama``...) or a YAML path (validated)."""
    p = Path(str(name_or_path))
    if p.suffix in (".yaml", ".yml"):
        return _from_file(load_profile_file(p))
    key = ALIASES.get(str(name_or_path).lower())
    if key is None:
        raise InputError(f"unknown profile {quote(str(name_or_path))}; expected a shipped one "
                         f"({', '.join(sorted(ALIASES))}) or a profile .yaml path")
    text = resources.files("tessera.planner.twin").joinpath(f"profiles/{key}.yaml").read_text()
    where = f"shipped profile {key}"
    (data,) = parse_yaml_documents(text, where)
    return _from_file(validate_profile(data, where))


def read_kv_capacity(path: str | Path, model: str) -> list[tuple[int, int, float | None]]:
    """(max_loras, max_rank, kv tokens or None when the engine refused) rows of one model."""
    want = ALIASES.get(model.lower(), model.lower())
    return [(r.max_loras, r.max_lora_rank, r.gpu_kv_cache_tokens) for r in read_kv_rows(path)
            if ALIASES.get(r.model.lower(), r.model.lower()) == want]


def fit_memory_model(rows: list[tuple[int, int, float | None]]) -> dict[str, float]:
    """Least squares of KV tokens on (1, slots x max rank, slots) over the started configurations."""
    ok = [(a, r, y) for a, r, y in rows if y is not None]
    if len(ok) < 3:
        raise ValueError("need at least 3 measured configurations to fit the memory model")
    A = np.array([[1.0, a * r, a] for a, r, _ in ok])
    y = np.array([y for *_, y in ok])
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    return {"c0": round(float(c[0]), 1), "per_rank_slot": round(float(-c[1]), 4),
            "per_slot": round(float(-c[2]), 4)}
