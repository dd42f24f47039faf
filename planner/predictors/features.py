"""Workload features of the predictors: what the placement loop knows about a
candidate set of adapters on one GPU, cheap to compute."""

from __future__ import annotations

import math

import numpy as np

MODEL_IDS = {"qwen2.5-7b-instruct": 0, "llama-3.1-8b-instruct": 1}
FEATURES = ["n_adapters", "a_max", "slots_per_adapter", "max_rank", "mean_rank", "total_rate", "log_total_rate",
            "max_rate", "rate_cv", "kv_tokens", "model_id"]


def feature_vector(n_adapters, a_max, max_rank, mean_rank, total_rate, max_rate, rate_cv, kv_tokens, model_id):
    return [float(n_adapters), float(a_max), a_max / n_adapters, float(max_rank), float(mean_rank),
            float(total_rate), math.log(max(total_rate, 1e-6)), float(max_rate), float(rate_cv),
            float(kv_tokens), float(model_id)]


def features(ranks, rates, a_max: int, model: str, kv_tokens: float) -> list[float]:
    ranks = np.asarray(ranks, float)
    rates = np.asarray(rates, float)
    return feature_vector(len(ranks), a_max, ranks.max(), ranks.mean(), rates.sum(), rates.max(),
                          rates.std() / rates.mean(), kv_tokens, MODEL_IDS[model])


def frame_features(table) -> np.ndarray:
    """Feature matrix of a sweep table (pyarrow or dict of columns)."""
    col = (lambda c: np.asarray(table.column(c).to_numpy(zero_copy_only=False))) if hasattr(table, "column") \
        else (lambda c: np.asarray(table[c]))
    n = col("n_adapters").astype(float)
    a = col("a_max").astype(float)
    tr = col("total_rate").astype(float)
    mid = np.array([MODEL_IDS[m] for m in col("model")], float)
    return np.column_stack([n, a, a / n, col("max_rank").astype(float), col("mean_rank").astype(float), tr,
                            np.log(np.maximum(tr, 1e-6)), col("max_rate").astype(float),
                            col("rate_cv").astype(float), col("kv_tokens").astype(float), mid])
