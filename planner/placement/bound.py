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

``server_capacity_rps`` makes the same argument at m slots and n distinct adapters in every step (slot_ms for
each of m + 1 slots, the KV cache m slots leave, the LoRA multiplier at n adapters). It cannot raise the
bound: a placement may give any server one slot, whose steps the rules charge one adapter and at most one
adapter load per request, and then every 1,000-adapter pool of the bench splits into two servers fewer than
tessera's within capacity (bench/place_bound_limit.py). What limits a server of many cold adapters on few
slots is the adapter rule: its running requests belong to at most m adapters, so a full batch needs many
requests of the same few adapters at once, i.e. a long polling cycle, after which the hour's last requests of
cold adapters go unserved; bounding that is a queueing argument over the arrivals and the hour, not made here.
"""

from __future__ import annotations

import math

from tessera.planner.predictors.workload_features import OUTPUT_TOKENS, PROMPT_TOKENS
from tessera.planner.twin.sim import STARVATION_RATIO, ServerConfig
from tessera.planner.twin.workload import server_max_lora_rank

from .model import LowerBound, PlacementProblem
from .server import ServerModel


def server_capacity_rps(model: ServerModel, max_lora_rank: int, slots: int = 1,
                        adapters_in_batch: float = 1.0) -> float:
    """Most req/s a server with ``slots`` GPU adapter slots (--max-loras) and --max-lora-rank ``max_lora_rank``
    carries unstarved, charging every step ``adapters_in_batch`` distinct adapters (the LoRA multiplier grows
    with each), for a server that starts (``ServerModel.starts``). Slots cost twice: the KV cache they leave
    (the memory model) and the LoRA kernels' grid, slot_ms for each of slots + 1 in every step whatever its batch
    (rank_factor >= 1). The lower bound uses one slot and one adapter, the cheapest any server can run."""
    profile = model.profile
    step, run_ms = profile.step, profile.overhead.run_ms
    eos = profile.lengths.eos_fraction
    # early stops: that share of requests stops at a uniform fraction of its max_tokens (rounded down, so
    # under one token below it), so a request produces at least this many tokens on average
    output = OUTPUT_TOKENS * (1.0 - eos / 2.0) - eos
    # the prefill step makes the first output token and the last is never fed back: each finished request
    # puts its prompt and output - 1 tokens through the step budget, and decodes for output - 1 steps
    decode_steps = output - 1.0
    budget = ServerConfig(max_loras=slots).max_num_batched_tokens
    decoding = min(profile.kv_tokens(slots, max_lora_rank) / (PROMPT_TOKENS + output / 2.0),
                   budget * decode_steps / (PROMPT_TOKENS + decode_steps))
    step_ms = ((step.a_ms + step.b_ms * decoding) * (step.lora_c0 + step.lora_c1 * adapters_in_batch)
               + run_ms * decoding + (slots + 1) * step.slot_ms)
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
