"""What one server can hold, as the compiled predictors and the memory model see it.

A server's candidate content is kept as running aggregates (``ServerLoad``), so
adding an adapter costs a few additions and one predictor call (microseconds),
never a pass over its adapters: that is what makes placing 1,000 adapters fast.

Per-adapter guard. The 0.9 rule judges a server's total throughput, and hides
an adapter that is never served: in vLLM's V1 scheduler a request waits while
the adapters already in the batch fill ``--max-loras``; when the adapters with
a request in the server outnumber the slots, hot adapters keep the slots and a
cold adapter's requests wait (twin with vLLM 0.8.5's rules, 60 Zipf-rated rank-16
adapters at 25 req/s, A_max 8: throughput 0.925 of offered, not starved, yet 23
adapters served below 0.9, the worst 0.79; the published twin showed it at 20
req/s). The guard gives every adapter its own slot, or keeps both the expected number of adapters with a request arriving within
``BUSY_WINDOW_S`` (about one request's time in the server) at or below the
slots, and the adapter rule's polling cycle (adapters x request latency /
slots: how long a cold adapter's request can wait for a slot) within 60 s. The
cycle limit came from the twin: 338 Zipf-rated Llama adapters at 24.2 req/s on
64 slots kept up (0.971 of offered) with busy adapters at 0.79 per slot, but a
94 s cycle left two adapters of 13 requests an hour with a request unserved.
The twin check then judges every adapter's served fraction itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from tessera.planner.predictors.workload_features import FEATURES, MODEL_IDS, TOKENS_PER_REQUEST, feature_vector
from tessera.planner.predictors.predict import predict_features
from tessera.planner.twin.profile import load_profile

from .model import AdapterDemand, PlacementProblem, Prediction

BUSY_WINDOW_S = 8.0  # the predictors' active8 window: about one request's time in a loaded server
# Slot counts the predictors were trained on (the sweep's A_max levels); a server may also
# give every adapter its own slot (A_max = its adapter count).
OVERLOAD = FEATURES.index("overload")
CYCLE = FEATURES.index("cycle8")
SLOT_LEVELS = (4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512)
# The sweep's fewest adapters (twin.sweep.N_LEVELS[0]; the sweep's module reads parquet, which placement
# may not import). Below it the trees extrapolate: after issue 26's resweep they called one Llama adapter at
# 5.8 req/s on its own slot starved and the same at 10 req/s healthy.
FEWEST_SWEPT_ADAPTERS = 8


def _busy(rate: float, window: float) -> float:
    return -math.expm1(-rate * window)


@dataclass(frozen=True)
class ServerLoad:
    """Running aggregates of the adapters on one server (the predictors' inputs)."""

    n: int = 0
    max_rank: int = 0
    rank_sum: float = 0.0
    rate_sum: float = 0.0
    rate_sq_sum: float = 0.0
    max_rate: float = 0.0
    busy2: float = 0.0
    busy8: float = 0.0
    busy30: float = 0.0

    def plus(self, adapter: AdapterDemand) -> "ServerLoad":
        r = adapter.rate_rps
        return ServerLoad(self.n + 1, max(self.max_rank, adapter.rank), self.rank_sum + adapter.rank,
                          self.rate_sum + r, self.rate_sq_sum + r * r, max(self.max_rate, r),
                          self.busy2 + _busy(r, 2.0), self.busy8 + _busy(r, BUSY_WINDOW_S), self.busy30 + _busy(r, 30.0))

    def spread_over(self, n: int) -> "ServerLoad":
        """``n`` adapters sharing this load's total rate evenly, at its mean and max rank."""
        rate = self.rate_sum / n
        return ServerLoad(n, self.max_rank, self.rank_sum / self.n * n, self.rate_sum, n * rate * rate, rate,
                          n * _busy(rate, 2.0), n * _busy(rate, BUSY_WINDOW_S), n * _busy(rate, 30.0))

    @classmethod
    def of(cls, adapters: Iterable[AdapterDemand]) -> "ServerLoad":
        load = cls()
        for adapter in adapters:
            load = load.plus(adapter)
        return load

    @property
    def rate_cv(self) -> float:
        if self.n == 0 or self.rate_sum <= 0:
            return 0.0
        mean = self.rate_sum / self.n
        variance = max(self.rate_sq_sum / self.n - mean * mean, 0.0)
        return math.sqrt(variance) / mean


@dataclass(frozen=True)
class SlotChoice:
    """A server's --max-loras with what the predictors say about it."""

    max_loras: int
    prediction: Prediction


class ServerModel:
    """The predictors, the memory model and the guard for one pool's servers."""

    def __init__(self, problem: PlacementProblem):
        profile = load_profile(problem.model)
        if problem.max_model_len:
            profile = profile.with_updates(max_model_len=int(problem.max_model_len))
        if profile.model not in MODEL_IDS:
            raise ValueError(f"model {profile.model!r} has no trained predictors (known: {', '.join(MODEL_IDS)})")
        self.profile = profile
        self.model_id = MODEL_IDS[profile.model]
        self.limits = problem.limits
        self._start_cache: dict[tuple[int, int], bool] = {}

    # ---- memory model ----
    def starts(self, max_loras: int, max_lora_rank: int) -> bool:
        key = (max_loras, max_lora_rank)
        if key not in self._start_cache:
            self._start_cache[key] = not self.profile.refuses_to_start(max_loras, max_lora_rank)
        return self._start_cache[key]

    def most_startable_slots(self, max_lora_rank: int) -> int:
        """Most slots a server with this --max-lora-rank starts with (the memory model)."""
        memory = self.profile.memory
        low, high = 0, max(1, int(memory.c0 // (memory.per_rank_slot * max_lora_rank + memory.per_slot)))
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.starts(mid, max_lora_rank) else (low, mid - 1)
        return low

    # ---- predictors ----
    def predict(self, load: ServerLoad, max_loras: int, max_lora_rank: int) -> Prediction:
        """What the predictors say. A server of fewer adapters than the sweep's fewest, each on its own
        slot, is judged as max(the sweep's fewest, its slots) adapters on a slot each sharing its rate
        evenly: in the twin that server is no easier (more distinct adapters a step, at least as many
        slots, so no more KV cache; a slot each, so no adapter waits for one), and the trees were trained
        on such servers (A_max = adapters)."""
        if load.n < FEWEST_SWEPT_ADAPTERS and max_loras >= load.n and load.rate_sum > 0:
            slots = max(FEWEST_SWEPT_ADAPTERS, max_loras)
            stand_in = self._predict(load.spread_over(slots), slots, max_lora_rank)
            return replace(stand_in, busy_per_slot=load.busy8 / max_loras)
        return self._predict(load, max_loras, max_lora_rank)

    def _predict(self, load: ServerLoad, max_loras: int, max_lora_rank: int) -> Prediction:
        kv = self.profile.kv_tokens(max_loras, max_lora_rank)
        features = feature_vector(load.n, max_loras, max_lora_rank, load.rank_sum / load.n, load.rate_sum,
                                  load.max_rate, load.rate_cv, kv, self.model_id, load.busy2, load.busy8,
                                  load.busy30)
        # an idle server (every rate 0) serves all of nothing; the capacity tree divides by the rate
        ratio, starved = predict_features(features) if load.rate_sum > 0 else (1.0, False)
        return Prediction(ratio=ratio, starved=starved, offered_tok_s=load.rate_sum * TOKENS_PER_REQUEST,
                          busy_per_slot=load.busy8 / max_loras, overload=features[OVERLOAD],
                          cycle_s=features[CYCLE], slot_per_adapter=max_loras >= load.n)

    def slot_candidates(self, load: ServerLoad) -> list[int]:
        cap = self.limits.max_lora_slots or load.n
        levels = [s for s in SLOT_LEVELS if s < load.n] + [load.n]
        return [s for s in levels if s <= cap] or [cap]

    def healthy(self, load: ServerLoad, max_loras: int, max_lora_rank: int) -> Prediction | None:
        """The prediction when this server starts, keeps up (so is not starved) and passes the guard."""
        if not self.starts(max_loras, max_lora_rank):
            return None
        prediction = self.predict(load, max_loras, max_lora_rank)
        return prediction if prediction.healthy else None

    def fewest_slots(self, load: ServerLoad, max_lora_rank: int, at_least: int = 0) -> SlotChoice | None:
        """The fewest slots (from ``at_least``) with which the server is healthy: slots cost KV cache."""
        for slots in self.slot_candidates(load):
            if slots < at_least:
                continue
            prediction = self.healthy(load, slots, max_lora_rank)
            if prediction is not None:
                return SlotChoice(slots, prediction)
        return None

    def best_slots(self, load: ServerLoad, max_lora_rank: int) -> SlotChoice | None:
        """The healthy slot count with the highest predicted throughput (ties: fewer slots)."""
        best: SlotChoice | None = None
        for slots in self.slot_candidates(load):
            prediction = self.healthy(load, slots, max_lora_rank)
            if prediction is not None and (best is None or prediction.throughput_tok_s
                                           > best.prediction.throughput_tok_s * (1 + 1e-9)):
                best = SlotChoice(slots, prediction)
        return best
