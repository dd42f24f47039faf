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
"""

from __future__ import annotations

import math

import numpy as np

MODEL_IDS = {"qwen2.5-7b-instruct": 0, "llama-3.1-8b-instruct": 1}
TOKENS_PER_REQUEST = 222.8 + 199.9
TAUS = (2.0, 8.0, 30.0)
FEATURES = ["n_adapters", "a_max", "slots_per_adapter", "max_rank", "mean_rank", "total_rate", "log_total_rate",
            "max_rate", "rate_cv", "kv_tokens", "model_id", "active2_per_slot", "active8_per_slot",
            "active30_per_slot", "rate_per_slot", "load_per_kv"]
STORED = ["active2", "active8", "active30"]  # per-adapter sums kept in the sweep table


def active(rates: np.ndarray) -> list[float]:
    return [float(np.sum(-np.expm1(-rates * tau))) for tau in TAUS]


def feature_vector(n_adapters, a_max, max_rank, mean_rank, total_rate, max_rate, rate_cv, kv_tokens, model_id,
                   active2, active8, active30):
    return [float(n_adapters), float(a_max), a_max / n_adapters, float(max_rank), float(mean_rank),
            float(total_rate), math.log(max(total_rate, 1e-6)), float(max_rate), float(rate_cv),
            float(kv_tokens), float(model_id), active2 / a_max, active8 / a_max, active30 / a_max,
            total_rate / a_max, total_rate * TOKENS_PER_REQUEST / max(kv_tokens, 1.0)]


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
    return np.column_stack([n, a, a / n, col("max_rank").astype(float), col("mean_rank").astype(float), tr,
                            np.log(np.maximum(tr, 1e-6)), col("max_rate").astype(float),
                            col("rate_cv").astype(float), kv, mid, col("active2") / a, col("active8") / a,
                            col("active30") / a, tr / a, tr * TOKENS_PER_REQUEST / np.maximum(kv, 1.0)])
