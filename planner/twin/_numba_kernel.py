"""The event loop of the twin, compiled with numba (fallback of the C build in _kernel.c).

One call simulates one server for one workload. The loop advances from one
engine step to the next (each step lasts as long as the step-time model says);
when the server is idle it jumps to the next arrival, so time is driven by
events, never by a fixed tick.

Nothing in a step is proportional to the waiting queue: waiting requests live
in one FIFO per adapter (a linked list through ``nxt``), and the adapters with
waiting requests sit in an indexed min-heap keyed on the FCFS key of their
head request. The V1 scheduler's scan of its single waiting deque (skip a
request whose adapter would be one adapter too many) is then: take the heap's
minimum while fewer than ``max_loras`` adapters are scheduled, otherwise the
minimum head among the already-scheduled adapters. The per-step work is over
the running requests only (the GPU does that work too).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .engine import *  # constants shared with the C build
from .engine import ITL_BINS, ITL_HI, ITL_LO


@njit(cache=True)
def _sift_up(i: int, heap: np.ndarray, hpos: np.ndarray, head: np.ndarray, key: np.ndarray) -> None:
    a = heap[i]
    ka = key[head[a]]
    while i > 0:
        p = (i - 1) >> 1
        b = heap[p]
        if key[head[b]] <= ka:
            break
        heap[i] = b
        hpos[b] = i
        i = p
    heap[i] = a
    hpos[a] = i


@njit(cache=True)
def _sift_down(i: int, n: int, heap: np.ndarray, hpos: np.ndarray, head: np.ndarray, key: np.ndarray) -> None:
    a = heap[i]
    ka = key[head[a]]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and key[head[heap[c + 1]]] < key[head[heap[c]]]:
            c += 1
        b = heap[c]
        if key[head[b]] >= ka:
            break
        heap[i] = b
        hpos[b] = i
        i = c
    heap[i] = a
    hpos[a] = i


@njit(cache=True)
def _heap_remove(a: int, nheap: int, heap: np.ndarray, hpos: np.ndarray, head: np.ndarray, key: np.ndarray) -> int:
    i = hpos[a]
    hpos[a] = -1
    nheap -= 1
    if i != nheap:
        last = heap[nheap]
        heap[i] = last
        hpos[last] = i
        _sift_down(i, nheap, heap, hpos, head, key)
        _sift_up(hpos[last], heap, hpos, head, key)
    return nheap


@njit(cache=True)
def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


@njit(cache=True)
def _rank_factor(tokens: int, params: np.ndarray) -> float:
    """What the max rank multiplies the per-slot cost by in a step of ``tokens`` tokens: 1 plus, for each
    16 of rank beyond the first, the shrink kernel's share of the blocks per slot (vLLM 0.8.5,
    vllm/lora/ops/triton_ops: _lora_shrink launches SPLIT_K x cdiv(M, 32) blocks per slice and 16 of rank,
    SPLIT_K 64 below 128 tokens and 8 from there; _lora_expand cdiv(M, 64) per output tile). 1 where the
    profile has no grid (sim.py has then scaled the costs by its constant share)."""
    if params[P_GRID_EXPAND] <= 0 or tokens <= 0:
        return 1.0
    shrink = params[P_GRID_SHRINK] * float((64 if tokens < 128 else 8) * _ceil_div(tokens, 32))
    expand = params[P_GRID_EXPAND] * float(_ceil_div(tokens, 64))
    factor: float = 1.0 + params[P_RANK_EXTRA] * shrink / (shrink + expand)
    return factor


@njit(cache=True)
def _load_in_set_order(step: int, nset: int, setlist: np.ndarray, set_order: np.ndarray, set_pos: np.ndarray,
                       set_stamp: np.ndarray, resident: np.ndarray, last_used: np.ndarray, n_resident: int,
                       max_loras: int, load_ms: np.ndarray, stats: np.ndarray) -> tuple[float, int]:
    """The GPU slots after one step's adapters, as vLLM 0.8.5 fills them (LRUCacheWorkerLoRAManager.
    _apply_adapters): one pass over the batch's adapters in their set's order touches each; one not in a slot
    is copied into the least recently touched slot (LRUCacheLoRAModelManager.activate_adapter ->
    _active_adapters.remove_oldest), which may hold an adapter of this batch the pass has not reached yet:
    that one is copied back when the pass reaches it. Returns the load time and the slots held."""
    n_ad = set_order.shape[0]
    ms = 0.0
    miss = False
    for q in range(nset):
        if resident[setlist[q]] == 0:
            miss = True
            break
    if not miss:  # only touches: the order of the stamps is the pass's, whatever order they are written in
        for q in range(nset):
            a = setlist[q]
            last_used[a] = step * n_ad + set_pos[a]
        return ms, n_resident
    for q in range(n_ad):
        a = set_order[q]
        if set_stamp[a] != step:
            continue
        if resident[a] == 0:
            if n_resident >= max_loras:
                lru = -1
                lru_t = np.int64(0)
                for b in range(n_ad):
                    if resident[b] == 1 and (lru < 0 or last_used[b] < lru_t):
                        lru = b
                        lru_t = last_used[b]
                resident[lru] = 0
                n_resident -= 1
            resident[a] = 1
            n_resident += 1
            stats[S_LOADS] += 1
            stats[S_LOAD_MS] += load_ms[a]
            ms += load_ms[a]
        last_used[a] = step * n_ad + q
    return ms, n_resident


@njit(cache=True, nogil=True)
def simulate_kernel(
    arr_t: np.ndarray,  # float64[N] arrival times, sorted
    arr_ad: np.ndarray,  # int32[N] adapter of each request
    prompt: np.ndarray,  # int32[N] prompt tokens
    out_len: np.ndarray,  # int32[N] output tokens the request will produce
    load_ms: np.ndarray,  # float64[A] CPU->GPU load time of each adapter
    set_order: np.ndarray,  # int32[A] the adapters in the order vLLM iterates a set of them (by name hash)
    params: np.ndarray,  # float64[N_PARAMS]
    # outputs
    state: np.ndarray,  # int8[N]
    gen: np.ndarray,  # int32[N] generated tokens
    ttft: np.ndarray,  # float32[N] time to first token (s)
    ts_running: np.ndarray,  # int32[S]
    ts_waiting: np.ndarray,  # int32[S]
    ts_kv: np.ndarray,  # float32[S]
    itl_hist: np.ndarray,  # float64[ITL_BINS]
    stats: np.ndarray,  # float64[N_STATS]
) -> tuple[int, int]:
    n_req = arr_t.shape[0]
    n_ad = load_ms.shape[0]
    duration = params[P_DURATION]
    max_tokens = int(params[P_MAX_TOKENS])
    max_seqs = int(params[P_MAX_SEQS])
    max_loras = int(params[P_MAX_LORAS])
    kv_blocks = int(params[P_KV_BLOCKS])
    bs = int(params[P_BLOCK])
    prealloc = int(params[P_PREALLOC])
    cap = int(params[P_CAP])
    sample_dt = params[P_SAMPLE_DT]
    n_samples = ts_running.shape[0]

    # per-request working state
    computed = np.zeros(n_req, np.int32)
    blocks = np.zeros(n_req, np.int32)
    nxt = np.full(n_req, -1, np.int32)
    key = np.empty(n_req, np.int64)
    last_t = np.zeros(n_req, np.float64)
    for r in range(n_req):
        key[r] = r
    neg_key = -1

    # per-adapter state
    head = np.full(n_ad, -1, np.int32)
    tail = np.full(n_ad, -1, np.int32)
    nwait_ad = np.zeros(n_ad, np.int32)
    heap = np.zeros(n_ad, np.int32)
    hpos = np.full(n_ad, -1, np.int32)
    nheap = 0
    resident = np.zeros(n_ad, np.int8)
    last_used = np.full(n_ad, -1, np.int64)
    set_stamp = np.full(n_ad, -1, np.int64)
    setlist = np.zeros(n_ad, np.int32)
    n_resident = 0
    in_set_order = params[P_SET_ORDER] > 0
    set_pos = np.zeros(n_ad, np.int64)
    for q in range(n_ad):
        set_pos[set_order[q]] = q

    running = np.zeros(max_seqs + 1, np.int32)
    sched_tok = np.zeros(max_seqs + 1, np.int32)
    nrunning = 0
    nwait = 0
    free_blocks = kv_blocks

    t = 0.0
    ia = 0
    step = 0
    next_sample = 0.0
    isample = 0
    itl_scale = ITL_BINS / (ITL_HI - ITL_LO)

    while True:
        # simulated time so far, polled by sim.py's progress thread (nogil); final value set below
        stats[S_END_T] = t
        # arrivals up to now
        while ia < n_req and arr_t[ia] <= t:
            if nrunning + nwait >= cap:
                state[ia] = DROPPED
                stats[S_DROPPED] += 1
            else:
                a = arr_ad[ia]
                state[ia] = WAITING
                if head[a] < 0:
                    head[a] = ia
                    tail[a] = ia
                    heap[nheap] = a
                    hpos[a] = nheap
                    nheap += 1
                    _sift_up(nheap - 1, heap, hpos, head, key)
                else:
                    nxt[tail[a]] = ia
                    tail[a] = ia
                nwait_ad[a] += 1
                nwait += 1
            ia += 1
        if t >= duration:
            break
        if nrunning == 0 and nwait == 0:
            # idle: jump to the next arrival
            t_next = duration
            if ia < n_req and arr_t[ia] < duration:
                t_next = arr_t[ia]
            while isample < n_samples and next_sample <= t_next:
                ts_running[isample] = 0
                ts_waiting[isample] = 0
                ts_kv[isample] = (kv_blocks - free_blocks) / kv_blocks
                isample += 1
                next_sample += sample_dt
            stats[S_KV_TIME] += (kv_blocks - free_blocks) * (t_next - t)
            t = t_next
            continue

        # ---- schedule one step ----
        step += 1
        budget = max_tokens
        nset = 0
        preempted = 0
        decode_n = 0
        prefill_tok = 0
        i = 0
        while i < nrunning and budget > 0:
            r = running[i]
            ntok = prompt[r] + gen[r] - computed[r]
            if ntok > budget:
                ntok = budget
            can = True
            while True:
                need = _ceil_div(computed[r] + ntok, bs) - blocks[r]
                if need <= free_blocks:
                    if need > 0:
                        extra = need + prealloc
                        if extra > free_blocks:
                            extra = free_blocks
                        blocks[r] += extra
                        free_blocks -= extra
                    break
                # preempt the last running request (recompute later)
                nrunning -= 1
                v = running[nrunning]
                free_blocks += blocks[v]
                blocks[v] = 0
                computed[v] = 0
                state[v] = WAITING
                key[v] = neg_key
                neg_key -= 1
                av = arr_ad[v]
                if head[av] < 0:
                    head[av] = v
                    tail[av] = v
                    nxt[v] = -1
                    heap[nheap] = av
                    hpos[av] = nheap
                    nheap += 1
                    _sift_up(nheap - 1, heap, hpos, head, key)
                else:
                    nxt[v] = head[av]
                    head[av] = v
                    _sift_up(hpos[av], heap, hpos, head, key)
                nwait_ad[av] += 1
                nwait += 1
                preempted += 1
                stats[S_PREEMPT] += 1
                if v == r:
                    can = False
                    break
            if not can:
                break
            sched_tok[i] = ntok
            budget -= ntok
            if ntok == 1 and computed[r] + 1 == prompt[r] + gen[r] and gen[r] > 0:
                decode_n += 1
            else:
                prefill_tok += ntok
            a = arr_ad[r]
            if set_stamp[a] != step:
                set_stamp[a] = step
                setlist[nset] = a
                nset += 1
            i += 1
        nsched = i
        for j in range(nsched, nrunning):
            sched_tok[j] = 0

        if preempted == 0:
            while budget > 0 and nwait > 0 and nrunning < max_seqs:
                a = -1
                if nset < max_loras:
                    a = heap[0]
                else:
                    best = np.int64(0)
                    for q in range(nset):
                        b = setlist[q]
                        if head[b] >= 0:
                            kb = key[head[b]]
                            if a < 0 or kb < best:
                                a = b
                                best = kb
                if a < 0:
                    break
                r = head[a]
                ntok = prompt[r] + gen[r]
                if ntok > budget:
                    ntok = budget
                need = _ceil_div(ntok, bs)
                if need > free_blocks:
                    break  # KV shortage stops admission for this step
                extra = need + prealloc
                if extra > free_blocks:
                    extra = free_blocks
                blocks[r] = extra
                free_blocks -= extra
                # dequeue r
                head[a] = nxt[r]
                nxt[r] = -1
                nwait_ad[a] -= 1
                nwait -= 1
                if head[a] < 0:
                    tail[a] = -1
                    nheap = _heap_remove(a, nheap, heap, hpos, head, key)
                else:
                    _sift_down(hpos[a], nheap, heap, hpos, head, key)
                state[r] = RUNNING
                running[nrunning] = r
                sched_tok[nrunning] = ntok
                nrunning += 1
                nsched = nrunning
                budget -= ntok
                prefill_tok += ntok
                if set_stamp[a] != step:
                    set_stamp[a] = step
                    setlist[nset] = a
                    nset += 1

        # ---- step time ----
        base = params[P_STEP_A] + params[P_STEP_B] * decode_n + params[P_STEP_C] * prefill_tok
        step_ms = base * (params[P_LORA_C0] + params[P_LORA_C1] * nset)
        if in_set_order:
            load, n_resident = _load_in_set_order(step, nset, setlist, set_order, set_pos, set_stamp, resident,
                                                  last_used, n_resident, max_loras, load_ms, stats)
            step_ms += load
        else:
            for q in range(nset):
                a = setlist[q]
                if resident[a] == 0:
                    if n_resident >= max_loras:
                        # evict the least recently used adapter not in this batch
                        lru = -1
                        lru_t = np.int64(0)
                        for b in range(n_ad):
                            if resident[b] == 1 and set_stamp[b] != step:
                                if lru < 0 or last_used[b] < lru_t:
                                    lru = b
                                    lru_t = last_used[b]
                        if lru >= 0:
                            resident[lru] = 0
                            n_resident -= 1
                    resident[a] = 1
                    n_resident += 1
                    stats[S_LOADS] += 1
                    stats[S_LOAD_MS] += load_ms[a]
                    step_ms += load_ms[a]
                last_used[a] = step
        # vLLM's LoRA kernels launch thread blocks for every slot (the grid's MAX_LORAS axis), busy or not
        step_ms += params[P_SLOT_MS] * (max_loras + 1) * _rank_factor(max_tokens - budget, params)
        # the scheduler's cost per waiting request: every one, or (vLLM V1 Scheduler.schedule) only those its
        # waiting loop visits and skips, which it does once the step's adapters fill max_loras
        counted = nwait
        if params[P_WAIT_SKIPPED] > 0:
            counted = 0
            if preempted == 0 and nset >= max_loras and nwait > 0:
                in_set = 0
                for q in range(nset):
                    in_set += nwait_ad[setlist[q]]
                counted = nwait - in_set
        step_ms += params[P_OVH_C0] + params[P_OVH_RUN] * nrunning + params[P_OVH_WAIT] * counted
        dt = step_ms / 1000.0
        t_new = t + dt

        used = kv_blocks - free_blocks
        while isample < n_samples and next_sample <= t_new:
            ts_running[isample] = nrunning
            ts_waiting[isample] = nwait
            ts_kv[isample] = used / kv_blocks
            isample += 1
            next_sample += sample_dt
        stats[S_RUN_TIME] += nrunning * dt
        stats[S_WAIT_TIME] += nwait * dt
        stats[S_KV_TIME] += used * dt
        stats[S_BUSY_T] += dt
        if nrunning > stats[S_MAX_RUN]:
            stats[S_MAX_RUN] = nrunning
        if nwait > stats[S_MAX_WAIT]:
            stats[S_MAX_WAIT] = nwait
        if used > stats[S_MAX_BLOCKS]:
            stats[S_MAX_BLOCKS] = used
        if nset > stats[S_MAX_SET]:
            stats[S_MAX_SET] = nset
        if n_resident > stats[S_MAX_RESIDENT]:
            stats[S_MAX_RESIDENT] = n_resident
        t = t_new
        if t > duration:
            break  # this step ends after the window: its tokens do not count

        # ---- apply the step ----
        j = 0
        for i in range(nrunning):
            r = running[i]
            k = sched_tok[i] if i < nsched else 0
            if k > 0:
                computed[r] += k
                if computed[r] == prompt[r] + gen[r]:
                    gen[r] += 1
                    if gen[r] == 1:
                        ttft[r] = t - arr_t[r]
                    else:
                        gap = t - last_t[r]
                        stats[S_ITL_SUM] += gap
                        stats[S_ITL_N] += 1
                        lg = np.log10(gap) if gap > 0 else ITL_LO
                        bi = int((lg - ITL_LO) * itl_scale)
                        if bi < 0:
                            bi = 0
                        elif bi >= ITL_BINS:
                            bi = ITL_BINS - 1
                        itl_hist[bi] += 1
                    last_t[r] = t
                    if gen[r] >= out_len[r]:
                        state[r] = FINISHED
                        free_blocks += blocks[r]
                        blocks[r] = 0
                        continue
            running[j] = r
            j += 1
        nrunning = j

    stats[S_STEPS] = step
    stats[S_END_T] = t
    while isample < n_samples:
        ts_running[isample] = nrunning
        ts_waiting[isample] = nwait
        ts_kv[isample] = (kv_blocks - free_blocks) / kv_blocks
        isample += 1
    return nrunning, nwait
