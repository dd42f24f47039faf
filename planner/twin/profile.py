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
import csv
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

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


def _from_dict(d: dict[str, Any]) -> ServerProfile:
    return ServerProfile(
        model=d["model"], gpu=d.get("gpu", "unknown"), max_model_len=int(d["max_model_len"]),
        block_size=int(d.get("block_size", 16)), prealloc_blocks=int(d.get("prealloc_blocks", 0)),
        step={k: float(v) for k, v in d["step"].items()},
        overhead={k: float(v) for k, v in d.get("overhead", {}).items()},
        load_ms={int(k): float(v) for k, v in d["load_ms"].items()},
        memory={k: float(v) for k, v in d["memory"].items()},
        lengths={k: float(v) for k, v in (d.get("lengths") or {}).items()},
    )


def load_profile(name_or_path: str | Path) -> ServerProfile:
    """Load a shipped profile by model name (``qwen``, ``llama``...) or a YAML path."""
    p = Path(str(name_or_path))
    if p.suffix in (".yaml", ".yml") and p.exists():
        return _from_dict(yaml.safe_load(p.read_text()))
    key = ALIASES.get(str(name_or_path).lower())
    if key is None:
        raise KeyError(f"unknown profile {name_or_path!r}; shipped: {sorted(set(ALIASES.values()))}")
    text = resources.files("tessera.planner.twin").joinpath(f"profiles/{key}.yaml").read_text()
    return _from_dict(yaml.safe_load(text))


def read_kv_capacity(path: str | Path, model: str) -> list[tuple[int, int, float | None]]:
    """(max_loras, max_rank, kv tokens or None when the engine refused) rows of one model."""
    want = ALIASES.get(model.lower(), model.lower())
    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if ALIASES.get(r["model"].lower(), r["model"].lower()) != want:
                continue
            v = r["gpu_kv_cache_tokens"].strip()
            out.append((int(r["max_loras"]), int(r["max_lora_rank"]), float(v) if v else None))
    return out


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
