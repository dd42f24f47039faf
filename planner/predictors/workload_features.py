"""Workload features of the predictors: what the placement loop knows about a
candidate set of adapters on one GPU, cheap to compute (and all of them can be
kept incrementally while adapters are added to a GPU).

Besides the sum and spread of rates, max and mean rank, adapter count, A_max
and model, three features carry the two mechanisms of starvation:
``active_tau / A_max`` is the expected number of adapters with a request in
the server (each adapter busy with probability 1 - exp(-rate x tau), tau a
request's time in the server) per GPU slot: above 1 the V1 adapter rule starts
skipping requests; ``rate_per_slot`` and ``load_per_kv`` relate the offered
load to the slots and to the KV cache.

Five more come from the twin's step-time model, step_ms = (a + b*B) *
(c0 + c1*n) + slot*(A_max + 1) + run*B with B running requests and n distinct
adapters in the batch (taken as min(active_tau, A_max)): every running request
gains one token per step, so with request rate lam and O output tokens per
request the decode utilisation is ``util = lam*O*(b*k + run)/1000`` (k = c0 +
c1*n; at 1 the batch grows without bound), the fixed-point time of a request in
the server is ``lat = O*(a*k + slot*(A_max + 1))/1000/(1 - util)`` s, and ``kv_demand`` is the KV the
fixed-point batch (lam*lat requests) needs over the KV capacity.

Four carry what a one-hour run does beyond the fixed point:

- ``cycle`` = adapters x lat / A_max (s): when every adapter has a request
  waiting, the adapter rule serves them like a polling system whose slots each
  hold one adapter for about one request's time in the server; a request waits
  up to a cycle, and the backlog left at the end of the hour (lost to the 0.9
  rule) grows with it.
- ``overload`` = lam / mu, mu the request rate of the largest batch the server
  can run: B* = min(KV tokens / KV per running request, the token budget
  shared by decode and chunked prefill: max_num_batched_tokens / (1 + P/O)),
  step time at B* with n = min(active30, A_max); ``overload_queued`` the same
  with every adapter in the batch (n = min(adapters, A_max)) and the
  scheduler's per-waiting cost of a full client queue (the sweep's
  outstanding-request cap): between the two lies the capacity of an
  overloaded hour, where throughput / offered is about 1 / overload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sim import OUTSTANDING_REQUEST_CAP, ServerConfig
from tessera.planner.twin.workload import active_adapters

MODEL_IDS = {"qwen2.5-7b-instruct": 0, "llama-3.1-8b-instruct": 1}
PROMPT_TOKENS = 222.8
OUTPUT_TOKENS = 199.9
TOKENS_PER_REQUEST = PROMPT_TOKENS + OUTPUT_TOKENS
KV_TOKENS_PER_RUNNING = PROMPT_TOKENS + OUTPUT_TOKENS / 2  # prompt + half the output, on average
FEATURES = ["n_adapters", "a_max", "slots_per_adapter", "max_rank", "mean_rank", "total_rate", "log_total_rate",
            "max_rate", "rate_cv", "kv_tokens", "model_id", "active2_per_slot", "active8_per_slot",
            "active30_per_slot", "rate_per_slot", "load_per_kv", "util30", "lat30", "kv_demand30", "util8",
            "lat8", "cycle8", "cycle30", "overload", "overload_queued"]
STORED = ["active2", "active8", "active30"]  # per-adapter sums kept in the sweep table
LAT_CAP = 1.0e4  # s, the fixed point's latency where util >= ~1


@dataclass(frozen=True)
class StepConstants:
    """One model's step-time constants from its twin profile (ms)."""

    a_ms: float
    b_ms: float
    lora_c0: float
    lora_c1: float
    run_ms: float
    wait_ms: float
    slot_ms: float  # per GPU slot (A_max + 1) and step, busy or not: vLLM's LoRA kernels' grid


@dataclass(frozen=True)
class ServerConstants:
    step: dict[int, StepConstants]  # by model id
    budget_batch: float  # the largest batch the token budget allows
    queue_cap: float  # the client's outstanding-request cap of the training runs


@cache
def server_constants() -> ServerConstants:
    """Read from the shipped twin profiles on first use, never at import."""
    step = {}
    for name, model_id in MODEL_IDS.items():
        profile = load_profile(name)
        step[model_id] = StepConstants(profile.step.a_ms, profile.step.b_ms, profile.step.lora_c0,
                                       profile.step.lora_c1, profile.overhead.run_ms, profile.overhead.wait_ms,
                                       profile.step.slot_ms)
    budget = ServerConfig(max_loras=1).max_num_batched_tokens / (1.0 + PROMPT_TOKENS / OUTPUT_TOKENS)
    return ServerConstants(step, budget, float(OUTSTANDING_REQUEST_CAP))


def feature_vector(n_adapters: float, a_max: float, max_rank: float, mean_rank: float, total_rate: float,
                   max_rate: float, rate_cv: float, kv_tokens: float, model_id: float, active2: float, active8: float,
                   active30: float) -> list[float]:
    """The FEATURES of one workload from its aggregates (this runs in the placement loop's inner step)."""
    constants = server_constants()
    step = constants.step[int(model_id)]
    a, b, c0, c1, run, wait = step.a_ms, step.b_ms, step.lora_c0, step.lora_c1, step.run_ms, step.wait_ms
    slots = step.slot_ms * (a_max + 1)
    lo = total_rate * OUTPUT_TOKENS / 1000.0
    k30 = c0 + c1 * (active30 if active30 < a_max else a_max)
    k8 = c0 + c1 * (active8 if active8 < a_max else a_max)
    kn = c0 + c1 * (n_adapters if n_adapters < a_max else a_max)
    u30 = lo * (b * k30 + run)
    u8 = lo * (b * k8 + run)
    l30 = min(OUTPUT_TOKENS * (a * k30 + slots) / 1000.0 / max(1.0 - u30, 0.01), LAT_CAP)
    l8 = min(OUTPUT_TOKENS * (a * k8 + slots) / 1000.0 / max(1.0 - u8, 0.01), LAT_CAP)
    kv = kv_tokens if kv_tokens > 1.0 else 1.0
    batch = min(kv / KV_TOKENS_PER_RUNNING, constants.budget_batch)
    # lam / mu = lam * O * step_ms(batch) / (1000 * batch)
    over = lo * ((a + b * batch) * k30 + slots + run * batch) / batch
    over_q = lo * ((a + b * batch) * kn + slots + run * batch + wait * constants.queue_cap) / batch
    return [float(n_adapters), float(a_max), a_max / n_adapters, float(max_rank), float(mean_rank),
            float(total_rate), math.log(max(total_rate, 1e-6)), float(max_rate), float(rate_cv),
            float(kv_tokens), float(model_id), active2 / a_max, active8 / a_max, active30 / a_max,
            total_rate / a_max, total_rate * TOKENS_PER_REQUEST / kv,
            u30, l30, total_rate * l30 * KV_TOKENS_PER_RUNNING / kv, u8, l8,
            n_adapters * l8 / a_max, n_adapters * l30 / a_max, over, over_q]


def features(ranks: ArrayLike, rates: ArrayLike, a_max: int, model: str, kv_tokens: float) -> list[float]:
    rank_array = np.asarray(ranks, float)
    rate_array = np.asarray(rates, float)
    return feature_vector(len(rank_array), a_max, rank_array.max(), rank_array.mean(), rate_array.sum(),
                          rate_array.max(), rate_array.std() / rate_array.mean(), kv_tokens, MODEL_IDS[model],
                          *active_adapters(rate_array))


AGGREGATES = ["n_adapters", "a_max", "max_rank", "mean_rank", "total_rate", "max_rate", "rate_cv", "kv_tokens",
              "model", *STORED]  # the sweep table's columns feature_vector takes, in its order


def frame_features(table: Any) -> np.ndarray:
    """Feature matrix of a sweep table (pyarrow or dict of columns)."""
    col = (lambda c: table.column(c).to_pylist()) if hasattr(table, "column") else (lambda c: list(table[c]))
    cols = {c: col(c) for c in AGGREGATES}
    cols["model"] = [MODEL_IDS[m] for m in cols["model"]]
    rows = [feature_vector(*r) for r in zip(*(cols[c] for c in AGGREGATES))]
    return np.array(rows, float).reshape(-1, len(FEATURES))
