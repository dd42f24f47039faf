"""Fast predictors for the placement loop (compiled trees in _compiled.py)."""

from __future__ import annotations

import math

from . import _compiled as C
from .features import FEATURES, MODEL_IDS, TOKENS_PER_REQUEST, feature_vector, features

_RATE = FEATURES.index("total_rate")


def predict_features(f: list[float]) -> tuple[float, bool]:
    """(throughput / offered, starved) from a ready feature list."""
    if C.starved_tree(*f):
        return min(1.0, math.exp(C.log_capacity_tree(*f)) / (f[_RATE] * TOKENS_PER_REQUEST)), True
    return C.ratio_tree(*f), False


def predict(ranks, rates, a_max: int, model: str, kv_tokens: float) -> tuple[float, bool]:
    """(throughput / offered, starved) for adapters (ranks, rates) on one GPU with A_max slots."""
    return predict_features(features(ranks, rates, a_max, model, kv_tokens))


__all__ = ["predict", "predict_features", "feature_vector", "MODEL_IDS"]
