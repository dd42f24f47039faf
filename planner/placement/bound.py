"""A lower bound on the servers any placement needs, from the twin's own step-time model.

Argument. In the twin a server runs engine steps; in a step every running request
gains one output token and prefill chunks share the step's token budget
(``max_num_batched_tokens``). A request has P prompt and O output tokens on
average, O after early stops (a share ``eos_fraction`` of requests stops at a
uniform fraction of its max_tokens). The prefill step makes its first output
token and the last is never fed back, so a finished request puts P + O - 1
tokens through the budget and decodes for O - 1 steps: a server finishing
lam requests a step keeps lam (P + O - 1) <= the token budget, with
B = lam (O - 1) requests decoding, and B is also capped by the KV cache
(B x (P + O/2) tokens, at least ``kv_tokens(1 slot, smallest rank)``, the
largest cache any server of the pool can have). A step takes at least
(a + b B) (c0 + c1 x 1) + run x B + 2 slot ms: the step model at one adapter
in the batch, the LoRA kernels' grid over the fewest slots (--max-loras 1, plus
one), no prefill cost beyond the budget, no waiting queue. So a server
finishes at most mu = lam x 1000 / step_ms(B) requests/s, which rises with
lam, hence is largest at the largest allowed lam. A server is unstarved only
if it finishes at least 0.9 of what it is offered, so it can be offered at
most mu / 0.9 req/s, and any placement needs at least ceil(total rate /
(mu / 0.9)) servers; and at least ceil(adapters / max adapters per server)
when the pool limits that. The bound is loose where batches hold many distinct
adapters (each one slows a step by c1 / c0, about 1%) and servers have many
slots (each costs slot ms a step), which real pools always do.
"""

from __future__ import annotations

import math

from tessera.planner.predictors.workload_features import OUTPUT_TOKENS, PROMPT_TOKENS
from tessera.planner.twin.sim import STARVATION_RATIO, ServerConfig
from tessera.planner.twin.workload import server_max_lora_rank

from .model import LowerBound, PlacementProblem
from .server import ServerModel


def server_capacity_rps(model: ServerModel, smallest_rank: int) -> float:
    profile = model.profile
    step, run_ms = profile.step, profile.overhead.run_ms
    eos = profile.lengths.eos_fraction
    # early stops: that share of requests stops at a uniform fraction of its max_tokens (rounded down, so
    # under one token below it), so a request produces at least this many tokens on average
    output = OUTPUT_TOKENS * (1.0 - eos / 2.0) - eos
    # the prefill step makes the first output token and the last is never fed back: each finished request
    # puts its prompt and output - 1 tokens through the step budget, and decodes for output - 1 steps
    decode_steps = output - 1.0
    budget = ServerConfig(max_loras=1).max_num_batched_tokens
    decoding = min(profile.kv_tokens(1, smallest_rank) / (PROMPT_TOKENS + output / 2.0),
                   budget * decode_steps / (PROMPT_TOKENS + decode_steps))
    # one slot: the LoRA kernels' grid costs slot_ms for each of --max-loras + 1 = 2 slots, at least (the
    # max rank's share only adds to it)
    step_ms = ((step.a_ms + step.b_ms * decoding) * (step.lora_c0 + step.lora_c1) + run_ms * decoding
               + 2.0 * step.slot_ms)
    finished_rps = decoding / decode_steps * 1000.0 / step_ms
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
                f"model at one adapter per batch and one slot, the largest batch the token budget and KV cache "
                f"allow, {PROMPT_TOKENS:.0f} prompt tokens and {OUTPUT_TOKENS:.0f} output tokens per request less "
                f"early stops, served >= {STARVATION_RATIO} of offered)")
    if per_server:
        argument += f"; {len(problem.adapters)} adapters at most {per_server} per server"
    return LowerBound(max(1, by_rate, by_count), capacity, argument)
