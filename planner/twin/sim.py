"""Run the twin: one server, one workload, one seed -> a TwinResult."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import engine, kernel
from .profile import ServerProfile
from .workload import VLLM_MAX_LORA_RANKS, Workload, generate_requests, server_max_lora_rank

# An adapter server is starved when it finishes less than this share of the
# tokens offered to it over a run (the real runs' rule, judged on one hour).
STARVATION_RATIO = 0.9
# The client's cap on outstanding requests in the real runs (it ran out of ports
# near 26-28k): replays and the predictors' training runs use it, so an
# overloaded hour never builds a queue beyond anything measured.
OUTSTANDING_REQUEST_CAP = 26000
@dataclass
class ServerConfig:
    max_loras: int  # A_max, GPU adapter slots
    max_rank: int | None = None  # --max-lora-rank, one of VLLM_MAX_LORA_RANKS; default: the one the adapters need
    max_num_seqs: int = 2048
    max_num_batched_tokens: int = 2048
    outstanding_cap: int = 10**9  # client-side cap on outstanding requests
    sample_dt: float = 5.0


@dataclass
class TwinResult:
    memory_error: bool
    kv_tokens: int
    arrivals: int = 0
    finished: int = 0
    running_end: int = 0
    waiting_end: int = 0
    dropped: int = 0
    throughput_tok_s: float = 0.0
    offered_tok_s: float = 0.0
    ratio: float = 0.0
    starved: bool = False
    served_fraction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    min_served_fraction: float = 0.0
    ttft_mean_ms: float = float("nan")
    ttft_p99_ms: float = float("nan")
    itl_mean_ms: float = float("nan")
    itl_p99_ms: float = float("nan")
    preemptions: int = 0
    loads: int = 0
    load_ms: float = 0.0  # time the steps spent loading adapters into GPU slots
    steps: int = 0
    mean_running: float = 0.0
    mean_waiting: float = 0.0
    max_running: int = 0
    max_waiting: int = 0
    mean_kv_usage: float = 0.0
    max_kv_blocks: int = 0
    kv_blocks: int = 0
    max_adapters_in_batch: int = 0
    max_resident: int = 0
    ts_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ts_running: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ts_waiting: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ts_kv: np.ndarray = field(default_factory=lambda: np.zeros(0))
    state: np.ndarray | None = None  # per-request final state (kept when keep_requests)
    ttft_s: np.ndarray | None = None  # per-request time to first token (kept when keep_requests)

    def summary(self) -> dict[str, float]:
        keys = ["memory_error", "arrivals", "finished", "dropped", "throughput_tok_s", "offered_tok_s",
                "ratio", "starved", "min_served_fraction", "ttft_mean_ms", "ttft_p99_ms", "itl_mean_ms",
                "itl_p99_ms", "preemptions", "loads", "mean_running", "max_running", "mean_waiting",
                "max_waiting", "mean_kv_usage", "kv_tokens"]
        return {k: getattr(self, k) for k in keys}


def vllm_set_order(n_adapters: int, seed: int) -> np.ndarray:
    """The order in which vLLM walks a step's adapters when it fills the GPU slots: a Python set of
    LoRARequests, which hash by name (``LoRARequest.__hash__``), and string hashes are salted per process, so
    one random order per server run. A stream of its own, so that the requests of a seed do not depend on it."""
    return np.random.default_rng([seed, 1]).permutation(n_adapters).astype(np.int32)


def engine_params(profile: ServerProfile, cfg: ServerConfig, duration: float, kv_blocks: int,
                  max_rank: int) -> np.ndarray:
    p = np.zeros(engine.N_PARAMS)
    s, o = profile.step, profile.overhead
    p[engine.P_DURATION] = duration
    p[engine.P_MAX_TOKENS] = cfg.max_num_batched_tokens
    p[engine.P_MAX_SEQS] = cfg.max_num_seqs
    p[engine.P_MAX_LORAS] = cfg.max_loras
    p[engine.P_KV_BLOCKS] = kv_blocks
    p[engine.P_BLOCK] = profile.block_size
    p[engine.P_PREALLOC] = profile.prealloc_blocks
    p[engine.P_CAP] = min(cfg.outstanding_cap, 2**31 - 1)
    p[engine.P_STEP_A] = s.a_ms
    p[engine.P_STEP_B] = s.b_ms
    p[engine.P_STEP_C] = s.c_ms
    p[engine.P_LORA_C0] = s.lora_c0
    p[engine.P_LORA_C1] = s.lora_c1
    p[engine.P_OVH_C0] = o.c0_ms
    p[engine.P_OVH_RUN] = o.run_ms
    p[engine.P_OVH_WAIT] = o.wait_ms
    p[engine.P_SAMPLE_DT] = cfg.sample_dt
    # the shrink kernel's blocks per slot grow with each 16 of --max-lora-rank (its grid's rank axis)
    rank_blocks = -(-max_rank // 16)
    if s.lora_grid is None:  # one share for every step
        p[engine.P_SLOT_MS] = s.slot_ms * (1 + s.slot_rank_share * (rank_blocks - 1))
    else:  # the kernels' share in each step (engine's rank factor)
        p[engine.P_SLOT_MS] = s.slot_ms
        p[engine.P_RANK_EXTRA] = rank_blocks - 1
        p[engine.P_GRID_SHRINK] = s.lora_grid.shrink_slices
        p[engine.P_GRID_EXPAND] = s.lora_grid.expand_tiles
    p[engine.P_WAIT_SKIPPED] = 1.0 if o.wait_counts == "skipped" else 0.0
    p[engine.P_SET_ORDER] = 1.0 if profile.slot_fill == "set_order" else 0.0
    return p


def _run_with_progress(kernel: Callable[..., tuple[int, int]], args: tuple[np.ndarray, ...], stats: np.ndarray,
                       progress: Callable[[float], object], poll_s: float) -> tuple[int, int]:
    """Run the kernel in a worker thread (the C call and the numba kernel release the
    GIL) and report the simulated time it has reached, read from ``stats[S_END_T]``
    which the kernel stores at every event, to ``progress(t)`` every ``poll_s``.
    The kernel's computation is exactly that of a plain call; only the caller waits
    differently, so results are bit-identical."""
    import threading

    out: dict[str, tuple[int, int]] = {}
    failed: list[BaseException] = []

    def work() -> None:
        try:
            out["r"] = kernel(*args)
        except BaseException as e:  # re-raised in the caller's thread
            failed.append(e)

    th = threading.Thread(target=work, name="twin-kernel", daemon=True)
    th.start()
    while True:
        th.join(poll_s)
        if not th.is_alive():
            break
        progress(float(stats[engine.S_END_T]))
    if failed:
        raise failed[0]
    progress(float(stats[engine.S_END_T]))
    return out["r"]


def simulate(workload: Workload, profile: ServerProfile, cfg: ServerConfig, seed: int = 0,
             keep_requests: bool = False, progress: Callable[[float], object] | None = None,
             poll_s: float = 0.1) -> TwinResult:
    """Simulate one workload. ``progress``, if given, is called with the simulated time
    (seconds, up to the duration) about every ``poll_s`` of wall time during the run."""
    max_rank = cfg.max_rank or server_max_lora_rank(workload.max_rank)
    if max_rank not in VLLM_MAX_LORA_RANKS:
        raise ValueError(f"--max-lora-rank {max_rank}: vLLM accepts only {VLLM_MAX_LORA_RANKS}")
    if workload.max_rank > max_rank:
        raise ValueError(f"adapter rank {workload.max_rank} exceeds --max-lora-rank {max_rank}")
    kv_tok = int(profile.kv_tokens(cfg.max_loras, max_rank))
    if profile.refuses_to_start(cfg.max_loras, max_rank):
        return TwinResult(memory_error=True, kv_tokens=max(kv_tok, 0))
    kv_blocks = profile.kv_blocks(cfg.max_loras, max_rank)

    rng = np.random.default_rng(seed)
    requests = generate_requests(workload, rng, profile.lengths.eos_fraction, profile.lengths.sigma)
    t, ad, p, o = requests.t, requests.adapter, requests.prompt, requests.output
    n = t.shape[0]
    T = workload.duration_s
    offered = float(p.sum(dtype=np.int64) + requests.max_tokens.sum(dtype=np.int64)) / T
    del requests  # frees max_tokens (when early stops made output a copy) before the kernel's arrays exist
    load_ms = np.array([profile.load_time_ms(int(r)) for r in workload.ranks], np.float64)
    set_order = vllm_set_order(workload.n_adapters, seed)
    params = engine_params(profile, cfg, T, kv_blocks, max_rank)
    n_s = int(T // cfg.sample_dt) + 1
    state = np.zeros(n, np.int8)
    gen = np.zeros(n, np.int32)
    ttft = np.full(n, np.nan, np.float32)
    ts_run = np.zeros(n_s, np.int32)
    ts_wait = np.zeros(n_s, np.int32)
    ts_kv = np.zeros(n_s, np.float32)
    hist = np.zeros(engine.ITL_BINS)
    stats = np.zeros(engine.N_STATS)
    kargs = (t, ad, p, o, load_ms, set_order, params, state, gen, ttft, ts_run, ts_wait, ts_kv, hist, stats)
    if progress is None:
        nrun, nwait = kernel.get_kernel()(*kargs)
    else:
        nrun, nwait = _run_with_progress(kernel.get_kernel(), kargs, stats, progress, poll_s)
    fin = state == engine.FINISHED
    tokens = float(p[fin].sum(dtype=np.int64) + o[fin].sum(dtype=np.int64))
    thr = tokens / T
    arrived_ad = np.bincount(ad, minlength=workload.n_adapters)
    fin_ad = np.bincount(ad[fin], minlength=workload.n_adapters)
    with np.errstate(invalid="ignore", divide="ignore"):
        served = np.where(arrived_ad > 0, fin_ad / np.maximum(arrived_ad, 1), np.nan)
    ft = ttft[fin]
    itl_n = stats[engine.S_ITL_N]
    if itl_n > 0:
        c = np.cumsum(hist)
        bi = int(np.searchsorted(c, 0.99 * c[-1]))
        edges = np.logspace(engine.ITL_LO, engine.ITL_HI, engine.ITL_BINS + 1)
        itl_p99 = float(np.sqrt(edges[bi] * edges[bi + 1]) * 1000)
        itl_mean = float(stats[engine.S_ITL_SUM] / itl_n * 1000)
    else:
        itl_p99 = itl_mean = float("nan")
    ratio = thr / offered if offered > 0 else 1.0
    res = TwinResult(
        memory_error=False, kv_tokens=kv_tok, arrivals=n, finished=int(fin.sum()),
        running_end=int(nrun), waiting_end=int(nwait + (state == engine.NOT_ARRIVED).sum()),
        dropped=int(stats[engine.S_DROPPED]), throughput_tok_s=thr, offered_tok_s=offered, ratio=ratio,
        starved=bool(ratio < STARVATION_RATIO), served_fraction=served,
        min_served_fraction=float(np.nanmin(served)) if n else 1.0,
        ttft_mean_ms=float(ft.mean() * 1000) if ft.size else float("nan"),
        ttft_p99_ms=float(np.percentile(ft, 99) * 1000) if ft.size else float("nan"),
        itl_mean_ms=itl_mean, itl_p99_ms=itl_p99,
        preemptions=int(stats[engine.S_PREEMPT]), loads=int(stats[engine.S_LOADS]), load_ms=float(stats[engine.S_LOAD_MS]),
        steps=int(stats[engine.S_STEPS]),
        mean_running=float(stats[engine.S_RUN_TIME] / T), mean_waiting=float(stats[engine.S_WAIT_TIME] / T),
        max_running=int(stats[engine.S_MAX_RUN]), max_waiting=int(stats[engine.S_MAX_WAIT]),
        mean_kv_usage=float(stats[engine.S_KV_TIME] / T / kv_blocks), max_kv_blocks=int(stats[engine.S_MAX_BLOCKS]),
        kv_blocks=kv_blocks, max_adapters_in_batch=int(stats[engine.S_MAX_SET]),
        max_resident=int(stats[engine.S_MAX_RESIDENT]),
        ts_t=np.arange(n_s) * cfg.sample_dt, ts_running=ts_run, ts_waiting=ts_wait, ts_kv=ts_kv,
        state=state if keep_requests else None, ttft_s=ttft if keep_requests else None,
    )
    return res
