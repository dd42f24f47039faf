/* The twin's event loop in C: a line-by-line port of engine.simulate_kernel
 * (numba), same arithmetic in the same order, so both give identical results.
 * Loaded with ctypes (see ckernel.py); compiled on first use. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { NOT_ARRIVED = 0, WAITING = 1, RUNNING = 2, FINISHED = 3, DROPPED = 4 };
enum { P_DURATION, P_MAX_TOKENS, P_MAX_SEQS, P_MAX_LORAS, P_KV_BLOCKS, P_BLOCK, P_PREALLOC, P_CAP,
       P_STEP_A, P_STEP_B, P_STEP_C, P_LORA_C0, P_LORA_C1, P_OVH_C0, P_OVH_RUN, P_OVH_WAIT, P_SAMPLE_DT,
       P_SLOT_MS, P_WAIT_SKIPPED, P_SET_ORDER, P_RANK_EXTRA, P_GRID_SHRINK, P_GRID_EXPAND };
enum { S_STEPS, S_PREEMPT, S_LOADS, S_DROPPED, S_ITL_SUM, S_ITL_N, S_RUN_TIME, S_KV_TIME, S_MAX_RUN,
       S_MAX_WAIT, S_MAX_BLOCKS, S_MAX_SET, S_MAX_RESIDENT, S_END_T, S_BUSY_T, S_WAIT_TIME, S_LOAD_MS };
/* The source this library was built from (setup.py and ckernel.py pass its hash): a library built from an
   older source, whose arguments may differ, is never called (ckernel.installed_library). */
#ifndef TESSERA_KERNEL_SOURCE
#define TESSERA_KERNEL_SOURCE ""
#endif
const char *kernel_source(void) { return TESSERA_KERNEL_SOURCE; }

#define ITL_BINS 400
#define ITL_LO (-4.0)
#define ITL_HI 2.0

typedef struct { int32_t *heap, *hpos, *head; int64_t *key; } H;

static void sift_up(H *h, int32_t i) {
    int32_t a = h->heap[i]; int64_t ka = h->key[h->head[a]];
    while (i > 0) {
        int32_t p = (i - 1) >> 1, b = h->heap[p];
        if (h->key[h->head[b]] <= ka) break;
        h->heap[i] = b; h->hpos[b] = i; i = p;
    }
    h->heap[i] = a; h->hpos[a] = i;
}

static void sift_down(H *h, int32_t i, int32_t n) {
    int32_t a = h->heap[i]; int64_t ka = h->key[h->head[a]];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h->key[h->head[h->heap[c + 1]]] < h->key[h->head[h->heap[c]]]) c += 1;
        int32_t b = h->heap[c];
        if (h->key[h->head[b]] >= ka) break;
        h->heap[i] = b; h->hpos[b] = i; i = c;
    }
    h->heap[i] = a; h->hpos[a] = i;
}

static int32_t heap_remove(H *h, int32_t a, int32_t nheap) {
    int32_t i = h->hpos[a];
    h->hpos[a] = -1; nheap -= 1;
    if (i != nheap) {
        int32_t last = h->heap[nheap];
        h->heap[i] = last; h->hpos[last] = i;
        sift_down(h, i, nheap);
        sift_up(h, h->hpos[last]);
    }
    return nheap;
}

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* What the max rank multiplies the per-slot cost by in a step of `tokens` tokens: 1 plus, for each 16 of
 * rank beyond the first, the shrink kernel's share of the blocks per slot (vLLM 0.8.5,
 * vllm/lora/ops/triton_ops: _lora_shrink launches SPLIT_K x cdiv(M, 32) blocks per slice and 16 of rank,
 * SPLIT_K 64 below 128 tokens and 8 from there; _lora_expand cdiv(M, 64) per output tile). 1 where the
 * profile has no grid (sim.py has then scaled the costs by its constant share). */
static double rank_factor(int64_t tokens, const double *params) {
    if (params[P_GRID_EXPAND] <= 0 || tokens <= 0) return 1.0;
    double shrink = params[P_GRID_SHRINK] * (double)((tokens < 128 ? 64 : 8) * cdiv(tokens, 32));
    double expand = params[P_GRID_EXPAND] * (double)cdiv(tokens, 64);
    return 1.0 + params[P_RANK_EXTRA] * shrink / (shrink + expand);
}

/* The GPU slots after one step's adapters, as vLLM 0.8.5 fills them (LRUCacheWorkerLoRAManager._apply_adapters):
 * one pass over the batch's adapters in their set's order touches each; one not in a slot is copied into the
 * least recently touched slot (LRUCacheLoRAModelManager.activate_adapter -> _active_adapters.remove_oldest),
 * which may hold an adapter of this batch the pass has not reached yet: that one is copied back when the pass
 * reaches it. Returns the load time; *n_resident is the slots held. */
static double load_in_set_order(int64_t step, int64_t nset, const int32_t *setlist, int64_t n_ad,
                                const int32_t *set_order, const int64_t *set_pos, const int64_t *set_stamp,
                                int8_t *resident, int64_t *last_used, int64_t *n_resident, int64_t max_loras,
                                const double *load_ms, double *stats) {
    double ms = 0.0;
    int miss = 0;
    for (int64_t q = 0; q < nset; q++) {
        if (resident[setlist[q]] == 0) { miss = 1; break; }
    }
    if (!miss) { /* only touches: the order of the stamps is the pass's, whatever order they are written in */
        for (int64_t q = 0; q < nset; q++) { int32_t a = setlist[q]; last_used[a] = step * n_ad + set_pos[a]; }
        return ms;
    }
    for (int64_t q = 0; q < n_ad; q++) {
        int32_t a = set_order[q];
        if (set_stamp[a] != step) continue;
        if (resident[a] == 0) {
            if (*n_resident >= max_loras) {
                int64_t lru = -1, lru_t = 0;
                for (int64_t b = 0; b < n_ad; b++) {
                    if (resident[b] == 1 && (lru < 0 || last_used[b] < lru_t)) { lru = b; lru_t = last_used[b]; }
                }
                resident[lru] = 0; *n_resident -= 1;
            }
            resident[a] = 1; *n_resident += 1; stats[S_LOADS] += 1; stats[S_LOAD_MS] += load_ms[a];
            ms += load_ms[a];
        }
        last_used[a] = step * n_ad + q;
    }
    return ms;
}

int64_t simulate_kernel(int64_t n_req, const double *arr_t, const int32_t *arr_ad, const int32_t *prompt,
                        const int32_t *out_len, int64_t n_ad, const double *load_ms, const int32_t *set_order,
                        const double *params,
                        int8_t *state, int32_t *gen, float *ttft, int64_t n_samples, int32_t *ts_running,
                        int32_t *ts_waiting, float *ts_kv, double *itl_hist, double *stats, int64_t *out_counts) {
    double duration = params[P_DURATION];
    int64_t max_tokens = (int64_t)params[P_MAX_TOKENS], max_seqs = (int64_t)params[P_MAX_SEQS];
    int64_t max_loras = (int64_t)params[P_MAX_LORAS], kv_blocks = (int64_t)params[P_KV_BLOCKS];
    int64_t bs = (int64_t)params[P_BLOCK], prealloc = (int64_t)params[P_PREALLOC], cap = (int64_t)params[P_CAP];
    double sample_dt = params[P_SAMPLE_DT];

    int32_t *computed = calloc(n_req ? n_req : 1, sizeof(int32_t));
    int32_t *blocks = calloc(n_req ? n_req : 1, sizeof(int32_t));
    int32_t *nxt = malloc((n_req ? n_req : 1) * sizeof(int32_t));
    int64_t *key = malloc((n_req ? n_req : 1) * sizeof(int64_t));
    double *last_t = calloc(n_req ? n_req : 1, sizeof(double));
    for (int64_t r = 0; r < n_req; r++) { nxt[r] = -1; key[r] = r; }
    int64_t neg_key = -1;

    int32_t *head = malloc(n_ad * sizeof(int32_t)), *tail = malloc(n_ad * sizeof(int32_t));
    int32_t *nwait_ad = calloc(n_ad, sizeof(int32_t)), *heap = calloc(n_ad, sizeof(int32_t));
    int32_t *hpos = malloc(n_ad * sizeof(int32_t)), *setlist = calloc(n_ad, sizeof(int32_t));
    int8_t *resident = calloc(n_ad, 1);
    int64_t *last_used = malloc(n_ad * sizeof(int64_t)), *set_stamp = malloc(n_ad * sizeof(int64_t));
    for (int64_t a = 0; a < n_ad; a++) { head[a] = tail[a] = hpos[a] = -1; last_used[a] = set_stamp[a] = -1; }
    H h = {heap, hpos, head, key};
    int32_t nheap = 0;
    int64_t n_resident = 0;
    int in_set_order = params[P_SET_ORDER] > 0;
    int64_t *set_pos = calloc(n_ad, sizeof(int64_t));
    for (int64_t q = 0; q < n_ad; q++) set_pos[set_order[q]] = q;

    int32_t *running = calloc(max_seqs + 1, sizeof(int32_t));
    int32_t *sched_tok = calloc(max_seqs + 1, sizeof(int32_t));
    int64_t nrunning = 0, nwait = 0, free_blocks = kv_blocks;

    double t = 0.0, next_sample = 0.0;
    int64_t ia = 0, step = 0, isample = 0;
    double itl_scale = ITL_BINS / (ITL_HI - ITL_LO);

    for (;;) {
        /* simulated time so far, for a progress bar polled by another thread (sim.py);
         * volatile so the store is never kept in a register; the final value is set below */
        ((volatile double *)stats)[S_END_T] = t;
        while (ia < n_req && arr_t[ia] <= t) {
            if (nrunning + nwait >= cap) {
                state[ia] = DROPPED; stats[S_DROPPED] += 1;
            } else {
                int32_t a = arr_ad[ia];
                state[ia] = WAITING;
                if (head[a] < 0) {
                    head[a] = (int32_t)ia; tail[a] = (int32_t)ia;
                    heap[nheap] = a; hpos[a] = nheap; nheap += 1;
                    sift_up(&h, nheap - 1);
                } else {
                    nxt[tail[a]] = (int32_t)ia; tail[a] = (int32_t)ia;
                }
                nwait_ad[a] += 1; nwait += 1;
            }
            ia += 1;
        }
        if (t >= duration) break;
        if (nrunning == 0 && nwait == 0) {
            double t_next = duration;
            if (ia < n_req && arr_t[ia] < duration) t_next = arr_t[ia];
            while (isample < n_samples && next_sample <= t_next) {
                ts_running[isample] = 0; ts_waiting[isample] = 0;
                ts_kv[isample] = (float)((double)(kv_blocks - free_blocks) / (double)kv_blocks);
                isample += 1; next_sample += sample_dt;
            }
            stats[S_KV_TIME] += (double)(kv_blocks - free_blocks) * (t_next - t);
            t = t_next;
            continue;
        }

        step += 1;
        int64_t budget = max_tokens, nset = 0, preempted = 0, decode_n = 0, prefill_tok = 0, i = 0;
        while (i < nrunning && budget > 0) {
            int32_t r = running[i];
            int64_t ntok = (int64_t)prompt[r] + gen[r] - computed[r];
            if (ntok > budget) ntok = budget;
            int can = 1;
            for (;;) {
                int64_t need = cdiv(computed[r] + ntok, bs) - blocks[r];
                if (need <= free_blocks) {
                    if (need > 0) {
                        int64_t extra = need + prealloc;
                        if (extra > free_blocks) extra = free_blocks;
                        blocks[r] += (int32_t)extra; free_blocks -= extra;
                    }
                    break;
                }
                nrunning -= 1;
                int32_t v = running[nrunning];
                free_blocks += blocks[v]; blocks[v] = 0; computed[v] = 0;
                state[v] = WAITING; key[v] = neg_key; neg_key -= 1;
                int32_t av = arr_ad[v];
                if (head[av] < 0) {
                    head[av] = v; tail[av] = v; nxt[v] = -1;
                    heap[nheap] = av; hpos[av] = nheap; nheap += 1;
                    sift_up(&h, nheap - 1);
                } else {
                    nxt[v] = head[av]; head[av] = v;
                    sift_up(&h, hpos[av]);
                }
                nwait_ad[av] += 1; nwait += 1; preempted += 1; stats[S_PREEMPT] += 1;
                if (v == r) { can = 0; break; }
            }
            if (!can) break;
            sched_tok[i] = (int32_t)ntok;
            budget -= ntok;
            if (ntok == 1 && computed[r] + 1 == prompt[r] + gen[r] && gen[r] > 0) decode_n += 1;
            else prefill_tok += ntok;
            int32_t a = arr_ad[r];
            if (set_stamp[a] != step) { set_stamp[a] = step; setlist[nset] = a; nset += 1; }
            i += 1;
        }
        int64_t nsched = i;
        for (int64_t j = nsched; j < nrunning; j++) sched_tok[j] = 0;

        if (preempted == 0) {
            while (budget > 0 && nwait > 0 && nrunning < max_seqs) {
                int32_t a = -1;
                if (nset < max_loras) {
                    a = heap[0];
                } else {
                    int64_t best = 0;
                    for (int64_t q = 0; q < nset; q++) {
                        int32_t b = setlist[q];
                        if (head[b] >= 0) {
                            int64_t kb = key[head[b]];
                            if (a < 0 || kb < best) { a = b; best = kb; }
                        }
                    }
                }
                if (a < 0) break;
                int32_t r = head[a];
                int64_t ntok = (int64_t)prompt[r] + gen[r];
                if (ntok > budget) ntok = budget;
                int64_t need = cdiv(ntok, bs);
                if (need > free_blocks) break;
                int64_t extra = need + prealloc;
                if (extra > free_blocks) extra = free_blocks;
                blocks[r] = (int32_t)extra; free_blocks -= extra;
                head[a] = nxt[r]; nxt[r] = -1;
                nwait_ad[a] -= 1; nwait -= 1;
                if (head[a] < 0) { tail[a] = -1; nheap = heap_remove(&h, a, nheap); }
                else sift_down(&h, hpos[a], nheap);
                state[r] = RUNNING;
                running[nrunning] = r; sched_tok[nrunning] = (int32_t)ntok;
                nrunning += 1; nsched = nrunning;
                budget -= ntok; prefill_tok += ntok;
                if (set_stamp[a] != step) { set_stamp[a] = step; setlist[nset] = a; nset += 1; }
            }
        }

        double base = params[P_STEP_A] + params[P_STEP_B] * decode_n + params[P_STEP_C] * prefill_tok;
        double step_ms = base * (params[P_LORA_C0] + params[P_LORA_C1] * nset);
        if (in_set_order) {
            step_ms += load_in_set_order(step, nset, setlist, n_ad, set_order, set_pos, set_stamp, resident, last_used,
                                         &n_resident, max_loras, load_ms, stats);
        } else {
            for (int64_t q = 0; q < nset; q++) {
                int32_t a = setlist[q];
                if (resident[a] == 0) {
                    if (n_resident >= max_loras) {
                        int64_t lru = -1, lru_t = 0;
                        for (int64_t b = 0; b < n_ad; b++) {
                            if (resident[b] == 1 && set_stamp[b] != step) {
                                if (lru < 0 || last_used[b] < lru_t) { lru = b; lru_t = last_used[b]; }
                            }
                        }
                        if (lru >= 0) { resident[lru] = 0; n_resident -= 1; }
                    }
                    resident[a] = 1; n_resident += 1; stats[S_LOADS] += 1; stats[S_LOAD_MS] += load_ms[a];
                    step_ms += load_ms[a];
                }
                last_used[a] = step;
            }
        }
        /* vLLM's LoRA kernels launch thread blocks for every slot (the grid's MAX_LORAS axis), busy or not */
        step_ms += params[P_SLOT_MS] * (max_loras + 1) * rank_factor(max_tokens - budget, params);
        /* per waiting request: every one, or (vLLM V1 Scheduler.schedule) only those its waiting loop
         * visits and skips, which it does once the step's adapters fill max_loras */
        int64_t counted = nwait;
        if (params[P_WAIT_SKIPPED] > 0) {
            counted = 0;
            if (preempted == 0 && nset >= max_loras && nwait > 0) {
                int64_t in_set = 0;
                for (int64_t q = 0; q < nset; q++) in_set += nwait_ad[setlist[q]];
                counted = nwait - in_set;
            }
        }
        step_ms += params[P_OVH_C0] + params[P_OVH_RUN] * nrunning + params[P_OVH_WAIT] * counted;
        double dt = step_ms / 1000.0;
        double t_new = t + dt;

        int64_t used = kv_blocks - free_blocks;
        while (isample < n_samples && next_sample <= t_new) {
            ts_running[isample] = (int32_t)nrunning; ts_waiting[isample] = (int32_t)nwait;
            ts_kv[isample] = (float)((double)used / (double)kv_blocks);
            isample += 1; next_sample += sample_dt;
        }
        stats[S_RUN_TIME] += nrunning * dt;
        stats[S_WAIT_TIME] += nwait * dt;
        stats[S_KV_TIME] += used * dt;
        stats[S_BUSY_T] += dt;
        if (nrunning > stats[S_MAX_RUN]) stats[S_MAX_RUN] = nrunning;
        if (nwait > stats[S_MAX_WAIT]) stats[S_MAX_WAIT] = nwait;
        if (used > stats[S_MAX_BLOCKS]) stats[S_MAX_BLOCKS] = used;
        if (nset > stats[S_MAX_SET]) stats[S_MAX_SET] = nset;
        if (n_resident > stats[S_MAX_RESIDENT]) stats[S_MAX_RESIDENT] = n_resident;
        t = t_new;
        if (t > duration) break;

        int64_t j = 0;
        for (int64_t ii = 0; ii < nrunning; ii++) {
            int32_t r = running[ii];
            int32_t k = ii < nsched ? sched_tok[ii] : 0;
            if (k > 0) {
                computed[r] += k;
                if (computed[r] == prompt[r] + gen[r]) {
                    gen[r] += 1;
                    if (gen[r] == 1) {
                        ttft[r] = (float)(t - arr_t[r]);
                    } else {
                        double gap = t - last_t[r];
                        stats[S_ITL_SUM] += gap; stats[S_ITL_N] += 1;
                        double lg = gap > 0 ? log10(gap) : ITL_LO;
                        int64_t bi = (int64_t)((lg - ITL_LO) * itl_scale);
                        if (bi < 0) bi = 0; else if (bi >= ITL_BINS) bi = ITL_BINS - 1;
                        itl_hist[bi] += 1;
                    }
                    last_t[r] = t;
                    if (gen[r] >= out_len[r]) {
                        state[r] = FINISHED; free_blocks += blocks[r]; blocks[r] = 0;
                        continue;
                    }
                }
            }
            running[j] = r; j += 1;
        }
        nrunning = j;
    }

    stats[S_STEPS] = (double)step;
    stats[S_END_T] = t;
    while (isample < n_samples) {
        ts_running[isample] = (int32_t)nrunning; ts_waiting[isample] = (int32_t)nwait;
        ts_kv[isample] = (float)((double)(kv_blocks - free_blocks) / (double)kv_blocks);
        isample += 1;
    }
    out_counts[0] = nrunning; out_counts[1] = nwait;
    free(computed); free(blocks); free(nxt); free(key); free(last_t); free(head); free(tail); free(nwait_ad);
    free(heap); free(hpos); free(setlist); free(resident); free(last_used); free(set_stamp); free(set_pos); free(running);
    free(sched_tok);
    return 0;
}
