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
"""

from __future__ import annotations

import math

import numpy as np

MODEL_IDS = {"qwen2.5-7b-instruct": 0, "llama-3.1-8b-instruct": 1}
TOKENS_PER_REQUEST = 222.8 + 199.9
TAUS = (2.0, 8.0, 30.0)
FEATURES = ["n_adapters", "a_max", "slots_per_adapter", "max_rank", "mean_rank", "total_rate", "log_total_rate",
            "max_rate", "rate_cv", "kv_tokens", "model_id", "active2_per_slot", "active8_per_slot",
            "active30_per_slot", "rate_per_slot", "load_per_kv", "util30", "lat30", "kv_demand30", "util8",
            "lat8"]
STORED = ["active2", "active8", "active30"]  # per-adapter sums kept in the sweep table


OUTPUT_TOKENS = 199.9
KV_TOKENS_PER_RUNNING = 222.8 + OUTPUT_TOKENS / 2  # prompt + half the output, on average


def _step_constants() -> dict[int, tuple[float, float, float, float, float]]:
    """(a_ms, b_ms, lora_c0, lora_c1, run_ms) of each model's twin profile, by model id."""
    from tessera.planner.twin.profile import load_profile

    out = {}
    for name, i in MODEL_IDS.items():
        p = load_profile(name)
        out[i] = (p.step["a_ms"], p.step["b_ms"], p.step["lora_c0"], p.step["lora_c1"],
                  p.overhead.get("run_ms", 0.0))
    return out


STEP = _step_constants()
LAT_CAP = 1.0e4  # s, the fixed point's latency where util >= ~1


def queue_features(total_rate, a_max, act, kv_tokens, model_id):
    """(util, lat) of the step-time model for act adapters expected busy; see the module doc."""
    a, b, c0, c1, run = STEP[int(model_id)]
    k = c0 + c1 * min(act, a_max)
    util = total_rate * OUTPUT_TOKENS * (b * k + run) / 1000.0
    lat = min(OUTPUT_TOKENS * a * k / 1000.0 / max(1.0 - util, 0.01), LAT_CAP)
    return util, lat


def active(rates: np.ndarray) -> list[float]:
    return [float(np.sum(-np.expm1(-rates * tau))) for tau in TAUS]


def feature_vector(n_adapters, a_max, max_rank, mean_rank, total_rate, max_rate, rate_cv, kv_tokens, model_id,
                   active2, active8, active30):
    # queue_features inlined (this runs in the placement loop's inner step)
    a, b, c0, c1, run = STEP[int(model_id)]
    lo = total_rate * OUTPUT_TOKENS / 1000.0
    k30 = c0 + c1 * (active30 if active30 < a_max else a_max)
    k8 = c0 + c1 * (active8 if active8 < a_max else a_max)
    u30 = lo * (b * k30 + run)
    u8 = lo * (b * k8 + run)
    l30 = min(OUTPUT_TOKENS * a * k30 / 1000.0 / max(1.0 - u30, 0.01), LAT_CAP)
    l8 = min(OUTPUT_TOKENS * a * k8 / 1000.0 / max(1.0 - u8, 0.01), LAT_CAP)
    kv = kv_tokens if kv_tokens > 1.0 else 1.0
    return [float(n_adapters), float(a_max), a_max / n_adapters, float(max_rank), float(mean_rank),
            float(total_rate), math.log(max(total_rate, 1e-6)), float(max_rate), float(rate_cv),
            float(kv_tokens), float(model_id), active2 / a_max, active8 / a_max, active30 / a_max,
            total_rate / a_max, total_rate * TOKENS_PER_REQUEST / kv,
            u30, l30, total_rate * l30 * KV_TOKENS_PER_RUNNING / kv, u8, l8]


def features(ranks, rates, a_max: int, model: str, kv_tokens: float) -> list[float]:
    ranks = np.asarray(ranks, float)
    rates = np.asarray(rates, float)
    return feature_vector(len(ranks), a_max, ranks.max(), ranks.mean(), rates.sum(), rates.max(),
                          rates.std() / rates.mean(), kv_tokens, MODEL_IDS[model], *active(rates))


def frame_features(table) -> np.ndarray:
    """Feature matrix of a sweep table (pyarrow or dict of columns)."""
    col = (lambda c: np.asarray(table.column(c).to_numpy(zero_copy_only=False))) if hasattr(table, "column") \
        else (lambda c: np.asarray(table[c]))
    n = col("n_adapters").astype(float)
    a = col("a_max").astype(float)
    tr = col("total_rate").astype(float)
    kv = col("kv_tokens").astype(float)
    mid = np.array([MODEL_IDS[m] for m in col("model")], float)
    q30 = np.array([queue_features(r, am, x, k, m) for r, am, x, k, m in zip(tr, a, col("active30"), kv, mid)])
    q8 = np.array([queue_features(r, am, x, k, m) for r, am, x, k, m in zip(tr, a, col("active8"), kv, mid)])
    q30 = q30.reshape(-1, 2)
    q8 = q8.reshape(-1, 2)
    return np.column_stack([n, a, a / n, col("max_rank").astype(float), col("mean_rank").astype(float), tr,
                            np.log(np.maximum(tr, 1e-6)), col("max_rate").astype(float),
                            col("rate_cv").astype(float), kv, mid, col("active2") / a, col("active8") / a,
                            col("active30") / a, tr / a, tr * TOKENS_PER_REQUEST / np.maximum(kv, 1.0),
                            q30[:, 0], q30[:, 1], tr * q30[:, 1] * KV_TOKENS_PER_RUNNING / np.maximum(kv, 1.0),
                            q8[:, 0], q8[:, 1]])
