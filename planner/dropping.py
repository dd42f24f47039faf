"""Early dropping: the one rule the frontend applies at every hop and `tessera simulate` at every stage.

A request is doomed, and dropped at once, when the budget it has left (its
deadline, arrival + the latency SLO, less the time now) is below the least
time the rest of its path needs by the plan: for the stage it is about to
enter, the hop there and a batch of one on that stage's fastest
configuration, then the same for every stage after it along the slowest
path, plus a margin. Both callers pass numbers or numpy arrays.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

import numpy as np

Key = TypeVar("Key", bound=Hashable)


def doomed(remaining_s: float | np.ndarray, needed_s: float | np.ndarray,
           margin_s: float = 0.0) -> bool | np.ndarray:
    """True where the remaining budget cannot cover what the path ahead needs (plus the margin)."""
    result: bool | np.ndarray = remaining_s < needed_s + margin_s
    return result


def least_time_after(order: Iterable[Key], children: Mapping[Key, Iterable[Key]], single_s: Mapping[Key, float],
                     hop_s: float) -> dict[Key, float]:
    """Per stage, the least time a request still needs once it has left that stage.

    `order` lists parents before children; `single_s` is each stage's batch of
    one on its fastest configuration. A stage with several children waits for
    all of them, so the slowest child's path counts.
    """
    after: dict[Key, float] = {}
    for stage in reversed(list(order)):
        after[stage] = max((hop_s + single_s[child] + after[child] for child in children.get(stage, ())),
                           default=0.0)
    return after


def needed_s(stage_single_s: float | np.ndarray, after_s: float | np.ndarray, hop_s: float) -> float | np.ndarray:
    """What a request entering a stage needs by the plan: the hop, a batch of one, the stages after it."""
    return hop_s + stage_single_s + after_s
