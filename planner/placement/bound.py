"""A lower bound on the servers any placement needs, from the twin's own step-time model.

Argument. In the twin a server runs engine steps; in a step every running request
gains one output token and prefill chunks share the step's token budget
(``max_num_batched_tokens``). A request needs P prompt and O output tokens on
average, so a server finishing lam requests/s with B requests running keeps
B (1 + P/O) <= the token budget, and B is also capped by the KV cache
(B x (P + O/2) tokens, at least ``kv_tokens(1 slot, smallest rank)``, the
largest cache any server of the pool can have). A step takes at least
(a + b B) (c0 + c1 x 1) + run x B ms: the step model at one adapter in the
batch, no prefill cost beyond the budget, no waiting queue. So a server
finishes at most mu = B x 1000 / (O x step_ms(B)) requests/s, which rises with
B, hence is largest at the largest allowed B. A server is unstarved only if it
finishes at least 0.9 of what it is offered, so it can be offered at most
mu / 0.9 req/s, and any placement needs at least ceil(total rate / (mu / 0.9))
servers; and at least ceil(adapters / max adapters per server) when the pool
limits that. The bound is loose where batches hold many distinct adapters
(each one slows a step by c1 / c0, about 1%), which real pools always do.
"""

from __future__ import annotations

import math

from tessera.planner.predictors.workload_features import (KV_TOKENS_PER_RUNNING, OUTPUT_TOKENS, PROMPT_TOKENS,
                                                 TOKENS_PER_REQUEST)
from tessera.planner.twin.sim import STARVATION_RATIO, ServerConfig
from tessera.planner.twin.workload import server_max_lora_rank

from .model import LowerBound, PlacementProblem
from .server import ServerModel


def server_capacity_rps(model: ServerModel, smallest_rank: int) -> float:
    step, run_ms = model.profile.step, model.profile.overhead.run_ms
    budget_batch = ServerConfig(max_loras=1).max_num_batched_tokens / (1.0 + PROMPT_TOKENS / OUTPUT_TOKENS)
    batch = min(model.profile.kv_tokens(1, smallest_rank) / KV_TOKENS_PER_RUNNING, budget_batch)
    step_ms = (step.a_ms + step.b_ms * batch) * (step.lora_c0 + step.lora_c1) + run_ms * batch
    finished_rps = batch * 1000.0 / (OUTPUT_TOKENS * step_ms)
    return finished_rps / STARVATION_RATIO


def lower_bound(problem: PlacementProblem, model: ServerModel) -> LowerBound:
    if not problem.adapters:
        return LowerBound(0, 0.0, "no adapters")
    capacity = server_capacity_rps(model, server_max_lora_rank(min(a.rank for a in problem.adapters)))
    total = sum(a.rate_rps for a in problem.adapters)
    by_rate = math.ceil(total / capacity - 1e-9)
    per_server = problem.limits.max_adapters_per_server
    by_count = math.ceil(len(problem.adapters) / per_server) if per_server else 1
    argument = (f"total {total:.2f} req/s over at most {capacity:.1f} req/s per unstarved server (the twin's step "
                f"model at one adapter per batch, the largest batch the token budget and KV cache allow, "
                f"{TOKENS_PER_REQUEST:.0f} tokens per request, served >= {STARVATION_RATIO} of offered)")
    if per_server:
        argument += f"; {len(problem.adapters)} adapters at most {per_server} per server"
    return LowerBound(max(1, by_rate, by_count), capacity, argument)
