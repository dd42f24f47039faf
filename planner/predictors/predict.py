"""Fast predictors for the placement loop (compiled trees in _compiled.py)."""

from __future__ import annotations

from .features import MODEL_IDS, feature_vector, features


def predict(ranks, rates, a_max: int, model: str, kv_tokens: float) -> tuple[float, bool]:
    """(throughput / offered, starved) for adapters (ranks, rates) on one GPU with A_max slots."""
    from . import _compiled as C

    f = features(ranks, rates, a_max, model, kv_tokens)
    return C.ratio_tree(*f), bool(C.starved_tree(*f))


__all__ = ["predict", "feature_vector", "MODEL_IDS"]
