"""The twin's workload file: one adapter server and the workload offered to it.

YAML or JSON with: model, max_loras, max_rank?, duration_s?, n_arrivals?,
outstanding_cap?, max_num_seqs?, max_num_batched_tokens?, mean_input?,
mean_output?, and adapters: either a list of {rank, rate} or
{count, ranks: [...], rates: [...]} (ranks and rates repeat cyclically).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .sim import ServerConfig
from .workload import Workload


@dataclass
class WorkloadFile:
    model: str  # a shipped profile's name or alias, or a profile YAML path
    server: ServerConfig
    workload: Workload

    @property
    def max_rank(self) -> int:
        """The server's --max-lora-rank: as given, else the largest adapter rank."""
        return int(self.server.max_rank or self.workload.max_rank)


def _adapters(spec: dict[str, Any]) -> tuple[list[int], list[float]]:
    adapters = spec["adapters"]
    if isinstance(adapters, dict):
        count = int(adapters["count"])
        ranks = [adapters["ranks"][i % len(adapters["ranks"])] for i in range(count)]
        rates = [adapters["rates"][i % len(adapters["rates"])] for i in range(count)]
        return ranks, rates
    return [a["rank"] for a in adapters], [a["rate"] for a in adapters]


SERVER_KEYS = ("max_rank", "outstanding_cap", "max_num_seqs", "max_num_batched_tokens")
WORKLOAD_KEYS = ("duration_s", "mean_input", "mean_output")


def _given(spec: dict[str, Any], keys: tuple[str, ...], kind: type) -> dict[str, Any]:
    """The keys the file sets, converted; the others keep the dataclasses' defaults."""
    return {key: kind(spec[key]) for key in keys if spec.get(key) is not None}


def load_workload_file(path: Path) -> WorkloadFile:
    spec = yaml.safe_load(path.read_text())
    ranks, rates = _adapters(spec)
    workload = Workload(ranks=np.array(ranks), rates=np.array(rates), **_given(spec, WORKLOAD_KEYS, float),
                        **_given(spec, ("n_arrivals",), int))
    server = ServerConfig(max_loras=int(spec["max_loras"]), **_given(spec, SERVER_KEYS, int))
    return WorkloadFile(model=str(spec.get("model", "qwen")), server=server, workload=workload)
