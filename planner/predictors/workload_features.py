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
(c0 + c1*n) + run*B with B running requests and n distinct adapters in the
batch (taken as min(active_tau, A_max)): every running request gains one
token per step, so with request rate lam and O output tokens per request the
decode utilisation is ``util = lam*O*(b*k + run)/1000`` (k = c0 + c1*n; at 1
the batch grows without bound), the fixed-point time of a request in the
server is ``lat = O*a*k/1000/(1 - util)`` s, and ``kv_demand`` is the KV the
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

import numpy as np

MODEL_IDS = {"qwen2.5-7b-instruct": 0, "llama-3.1-8b-instruct": 1}
PROMPT_TOKENS = 222.8
OUTPUT_TOKENS = 199.9
TOKENS_PER_REQUEST = PROMPT_TOKENS + OUTPUT_TOKENS
KV_TOKENS_PER_RUNNING = PROMPT_TOKENS + OUTPUT_TOKENS / 2  # prompt + half the output, on average
TAUS = (2.0, 8.0, 30.0)
FEATURES = ["n_adapters", "a_max", "slots_per_adapter", "max_rank", "mean_rank", "total_rate", "log_total_rate",
            "max_rate", "rate_cv", "kv_tokens", "model_id", "active2_per_slot", "active8_per_slot",
            "active30_per_slot", "rate_per_slot", "load_per_kv", "util30", "lat30", "kv_demand30", "util8",
            "lat8", "cycle8", "cycle30", "overload", "overload_queued"]
STORED = ["active2", "active8", "active30"]  # per-adapter sums kept in the sweep table
LAT_CAP = 1.0e4  # s, the fixed point's latency where util >= ~1


def _server_constants() -> tuple[dict[int, tuple[float, ...]], float, float]:
    """Step-time constants (a_ms, b_ms, lora_c0, lora_c1, run_ms, wait_ms) of each model's twin
    profile by model id; the largest batch the token budget allows; the sweep's client queue."""
    from tessera.planner.twin.profile import load_profile
    from tessera.planner.twin.sim import ServerConfig
    from tessera.planner.twin.sweep import SWEEP_CAP

    step = {}
    for name, i in MODEL_IDS.items():
        p = load_profile(name)
        step[i] = (p.step["a_ms"], p.step["b_ms"], p.step["lora_c0"], p.step["lora_c1"],
                   p.overhead.get("run_ms", 0.0), p.overhead.get("wait_ms", 0.0))
    budget = ServerConfig(max_loras=1).max_num_batched_tokens / (1.0 + PROMPT_TOKENS / OUTPUT_TOKENS)
    return step, budget, float(SWEEP_CAP)


STEP, BUDGET_BATCH, QUEUE_CAP = _server_constants()


def active(rates: np.ndarray) -> list[float]:
    return [float(np.sum(-np.expm1(-rates * tau))) for tau in TAUS]


def feature_vector(n_adapters, a_max, max_rank, mean_rank, total_rate, max_rate, rate_cv, kv_tokens, model_id,
                   active2, active8, active30):
    """The FEATURES of one workload from its aggregates (this runs in the placement loop's inner step)."""
    a, b, c0, c1, run, wait = STEP[int(model_id)]
    lo = total_rate * OUTPUT_TOKENS / 1000.0
    k30 = c0 + c1 * (active30 if active30 < a_max else a_max)
    k8 = c0 + c1 * (active8 if active8 < a_max else a_max)
    kn = c0 + c1 * (n_adapters if n_adapters < a_max else a_max)
    u30 = lo * (b * k30 + run)
    u8 = lo * (b * k8 + run)
    l30 = min(OUTPUT_TOKENS * a * k30 / 1000.0 / max(1.0 - u30, 0.01), LAT_CAP)
    l8 = min(OUTPUT_TOKENS * a * k8 / 1000.0 / max(1.0 - u8, 0.01), LAT_CAP)
    kv = kv_tokens if kv_tokens > 1.0 else 1.0
    batch = min(kv / KV_TOKENS_PER_RUNNING, BUDGET_BATCH)
    # lam / mu = lam * O * step_ms(batch) / (1000 * batch)
    over = lo * ((a + b * batch) * k30 + run * batch) / batch
    over_q = lo * ((a + b * batch) * kn + run * batch + wait * QUEUE_CAP) / batch
    return [float(n_adapters), float(a_max), a_max / n_adapters, float(max_rank), float(mean_rank),
            float(total_rate), math.log(max(total_rate, 1e-6)), float(max_rate), float(rate_cv),
            float(kv_tokens), float(model_id), active2 / a_max, active8 / a_max, active30 / a_max,
            total_rate / a_max, total_rate * TOKENS_PER_REQUEST / kv,
            u30, l30, total_rate * l30 * KV_TOKENS_PER_RUNNING / kv, u8, l8,
            n_adapters * l8 / a_max, n_adapters * l30 / a_max, over, over_q]


def features(ranks, rates, a_max: int, model: str, kv_tokens: float) -> list[float]:
    ranks = np.asarray(ranks, float)
    rates = np.asarray(rates, float)
    return feature_vector(len(ranks), a_max, ranks.max(), ranks.mean(), rates.sum(), rates.max(),
                          rates.std() / rates.mean(), kv_tokens, MODEL_IDS[model], *active(rates))


AGGREGATES = ["n_adapters", "a_max", "max_rank", "mean_rank", "total_rate", "max_rate", "rate_cv", "kv_tokens",
              "model", *STORED]  # the sweep table's columns feature_vector takes, in its order


def frame_features(table) -> np.ndarray:
    """Feature matrix of a sweep table (pyarrow or dict of columns)."""
    col = (lambda c: table.column(c).to_pylist()) if hasattr(table, "column") else (lambda c: list(table[c]))
    cols = {c: col(c) for c in AGGREGATES}
    cols["model"] = [MODEL_IDS[m] for m in cols["model"]]
    rows = [feature_vector(*r) for r in zip(*(cols[c] for c in AGGREGATES))]
    return np.array(rows, float).reshape(-1, len(FEATURES))
