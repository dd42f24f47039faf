"""Fast predictors for the placement loop (compiled trees in _compiled.py)."""

from __future__ import annotations

import math
from typing import NamedTuple

from numpy.typing import ArrayLike

from . import _compiled as compiled_trees
from .workload_features import FEATURES, MODEL_IDS, TOKENS_PER_REQUEST, feature_vector, features

_RATE = FEATURES.index("total_rate")


class Prediction(NamedTuple):
    """What the twin would report after an hour: throughput over offered tokens, and whether
    that falls under the starvation ratio."""

    ratio: float
    starved: bool


def predict_features(f: list[float]) -> Prediction:
    """The prediction from a ready feature list."""
    if compiled_trees.starved_tree(*f):
        capacity = math.exp(compiled_trees.log_capacity_tree(*f))
        return Prediction(min(1.0, capacity / (f[_RATE] * TOKENS_PER_REQUEST)), True)
    return Prediction(compiled_trees.ratio_tree(*f), False)


def predict(ranks: ArrayLike, rates: ArrayLike, a_max: int, model: str, kv_tokens: float) -> Prediction:
    """The prediction for adapters (ranks, rates) on one GPU with A_max slots."""
    return predict_features(features(ranks, rates, a_max, model, kv_tokens))


__all__ = ["Prediction", "predict", "predict_features", "feature_vector", "MODEL_IDS"]
