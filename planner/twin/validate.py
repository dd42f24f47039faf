"""Replay the real Qwen runs in the twin; calibrate on one half, judge on the other.

Each real run is replayed with its actual arrival count (``total_prompts_sent``)
and ONE fixed cap on outstanding requests for every run (the client ran out of
ports near 26-28k outstanding), never a per-run measured figure. The rank<->rate
pairing was not recorded, so each seed draws a new pairing from the run's
multisets; results are averaged over seeds.

Halves: calibrate on the max-rank-16 runs and judge on the max-rank-32 runs,
then the reverse. What calibration fits (``calibrate``):
  * ``eos_fraction``: share of requests that stop before max_tokens, from the
    token counts of finished requests vs the prompt pool's means;
  * the step-time coefficients, by least squares of the measured mean ITL on
    the measured gauges (mean running, mean waiting, prompt tokens/s) of the
    calibration runs only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.input_files import InputError, csv_records, shorten

from .files import StepCoefficients
from .profile import ServerProfile
from .sim import OUTSTANDING_REQUEST_CAP, STARVATION_RATIO, ServerConfig, simulate
from .workload import Workload


def find_data_dir() -> Path:
    """shared/data/vllm-lora, looked up from the environment, the cwd and this file."""
    cands = []
    if os.environ.get("TESSERA_VLLM_LORA_DATA"):
        cands.append(Path(os.environ["TESSERA_VLLM_LORA_DATA"]))
    for base in [Path.cwd(), Path(__file__).resolve()]:
        for parent in [base, *base.parents]:
            cands.append(parent / "shared" / "data" / "vllm-lora")
            cands.append(parent.parent / "shared" / "data" / "vllm-lora")
    for c in cands:
        if (c / "qwen_runs.csv").exists():
            return c
    raise FileNotFoundError("shared/data/vllm-lora not found; set TESSERA_VLLM_LORA_DATA")


@dataclass
class RealRun:
    idx: int
    n_adapters: int
    ranks: list[int]
    rate_multiset: list[float]
    max_loras: int
    max_rank: int
    arrivals: int
    duration: float
    mean_in: float
    mean_out: float
    throughput: float
    ideal: float
    starved: bool
    itl_ms: float
    mean_running: float
    mean_waiting: float
    prompt_tok_s: float
    finished: int
    out_tokens: float
    dt_throughput: float
    dt_starved: bool
    rate_label: str
    kv_usage: float  # mean share of the KV cache in use
    kv_cache_tokens: float  # the engine's KV capacity, estimated from its log
    ttft_ms: float  # mean time to first token of the completed requests

    @property
    def low_rate(self) -> bool:
        return max(self.rate_multiset) < 0.5


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MAX_STEP_TOKENS = 2048  # the measured servers' --max-num-batched-tokens
Number = TypeVar("Number", int, float)


def _f(x: str | None, default: float = float("nan")) -> float:
    """A number read from a cell; the default where the cell is missing or not a number."""
    if x is None:
        return default
    try:
        return float(x)
    except ValueError:
        return default


RUN_COLUMNS = ("status", "throughput_tok_s", "rate_counts", "served_adapters", "adapter_ranks", "max_loras",
               "max_lora_rank", "total_prompts_sent", "duration_s")


def load_runs(path: str | Path | None = None) -> list[RealRun]:
    """The complete runs of a qwen_runs.csv; a cell that cannot be read is an InputError naming line and column."""
    path = Path(path) if path else find_data_dir() / "qwen_runs.csv"
    runs = []
    for i, (line, r) in enumerate(csv_records(path, RUN_COLUMNS)):
        if r["status"] != "ok" or not r["throughput_tok_s"]:
            continue
        try:
            runs.append(_run_from_record(i, r))
        except (ValueError, KeyError, TypeError) as error:
            raise InputError(f"{path}:{line}: {str(error)[:200]}") from None
    return runs


def _counted(column: str, text: str, parse: Callable[[str], Number], low: float, high: float) -> list[Number]:
    values = []
    for part in text.split():
        value = parse(part)
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{column}: {shorten(part)} is outside [{low:g}, {high:g}]")
        values.append(value)
    if len(values) > 4096:
        raise ValueError(f"{column}: more than 4096 values")
    return values


def _run_from_record(i: int, r: dict[str, str]) -> RealRun:
    mult: list[float] = []
    for part in r["rate_counts"].split():
        if part.count("x") != 1:
            raise ValueError(f"rate_counts: {shorten(part)}: expected RATExCOUNT, as 0.1x4")
        v, c = part.split("x")
        rate, count = float(v), int(c)
        if not (math.isfinite(rate) and 0 <= rate <= 1000 and 0 <= count <= 4096 - len(mult)):
            raise ValueError(f"rate_counts: {shorten(part)}: expected RATExCOUNT, rate 0..1000, at most 4096 in all")
        mult += [rate] * count
    arrivals = int(r["total_prompts_sent"])
    if not 0 <= arrivals <= 2_000_000:
        raise ValueError(f"total_prompts_sent: {arrivals} is outside [0, 2000000]")
    return RealRun(
        idx=i, n_adapters=int(_counted("served_adapters", r["served_adapters"], int, 1, 4096)[0]),
        ranks=_counted("adapter_ranks", r["adapter_ranks"], int, 1, 512), rate_multiset=mult,
        max_loras=int(_counted("max_loras", r["max_loras"], int, 1, 4096)[0]),
        max_rank=int(_counted("max_lora_rank", r["max_lora_rank"], int, 1, 512)[0]),
        arrivals=arrivals, duration=_f(r["duration_s"]),
        mean_in=_counted("pool_mean_input_tokens", r.get("pool_mean_input_tokens") or "222.8", float, 4, 1024)[0],
        mean_out=_counted("pool_mean_output_tokens", r.get("pool_mean_output_tokens") or "199.9", float, 1, 2044)[0],
        throughput=_f(r["throughput_tok_s"]), ideal=_f(r.get("ideal_tok_s")),
        starved=r.get("starvation") == "1", itl_ms=_f(r.get("itl_ms")), mean_running=_f(r.get("mean_running")),
        mean_waiting=_f(r.get("mean_waiting")), prompt_tok_s=_f(r.get("prompt_tok_s")),
        finished=int(_f(r.get("finished_requests"), 0)), out_tokens=_f(r.get("total_output_tokens")),
        dt_throughput=_f(r.get("dt_throughput_tok_s")), dt_starved=r.get("dt_starvation") == "1",
        rate_label=r.get("adapter_rates", ""), kv_usage=_f(r.get("mean_kv_usage")),
        kv_cache_tokens=_f(r.get("kv_cache_tokens_est")), ttft_ms=_f(r.get("mean_ttft_ms_completed")))


def workload_for(run: RealRun, seed: int) -> Workload:
    rng = np.random.default_rng(10_000 + seed)
    n = run.n_adapters
    ranks = np.array([run.ranks[i % len(run.ranks)] for i in range(n)])
    rng.shuffle(ranks)
    rates = np.array(run.rate_multiset[:n], float)
    rng.shuffle(rates)
    return Workload(ranks=ranks, rates=rates, duration_s=3600.0, n_arrivals=run.arrivals,
                    mean_input=run.mean_in, mean_output=run.mean_out)


@dataclass(frozen=True)
class SeedReplay:
    """One real run replayed with one seed (one pairing of ranks and rates)."""

    run_idx: int
    throughput: float  # tokens/s
    offered: float  # tokens/s
    itl_ms: float
    ttft_ms: float  # mean over finished requests
    running: float  # mean running requests
    memory_error: bool
    min_served: float
    load_ms_per_step: float = 0.0  # the twin's adapter loads, ms per step


@dataclass(frozen=True)
class Replay:
    """One real run replayed in the twin, averaged over seeds."""

    throughput: float  # tokens/s
    offered: float  # tokens/s
    itl_ms: float  # NaN when no seed measured an inter-token latency
    ttft_ms: float
    running: float
    memory_error: bool  # the server refused to start under any seed
    min_served: float
    load_ms_per_step: float
    # the twin's own spread: mean |seed - mean| / mean of the throughput. The real
    # runs were each run once, so an error below this is noise, not fidelity.
    seed_spread: float

    @property
    def ratio(self) -> float:
        return self.throughput / self.offered if self.offered else float("nan")


def _replay_one(job: tuple[RealRun, ServerProfile, int]) -> SeedReplay:
    run, profile, seed = job
    res = simulate(workload_for(run, seed), profile,
                   ServerConfig(max_loras=run.max_loras, max_rank=run.max_rank,
                                outstanding_cap=OUTSTANDING_REQUEST_CAP), seed=seed)
    return SeedReplay(run.idx, res.throughput_tok_s, res.offered_tok_s, res.itl_mean_ms, res.ttft_mean_ms,
                      res.mean_running, res.memory_error, res.min_served_fraction,
                      res.load_ms / res.steps if res.steps else 0.0)


def _nanmean(values: list[float]) -> float:
    a = np.array(values, float)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def _mean_over_seeds(seeds: list[SeedReplay]) -> Replay:
    thr = np.array([s.throughput for s in seeds], float)
    mean = float(thr.mean())
    return Replay(throughput=mean, offered=float(np.mean([s.offered for s in seeds])),
                  itl_ms=_nanmean([s.itl_ms for s in seeds]), ttft_ms=_nanmean([s.ttft_ms for s in seeds]),
                  seed_spread=float(np.mean(np.abs(thr - mean)) / mean) if mean > 0 else 0.0,
                  running=float(np.mean([s.running for s in seeds])),
                  memory_error=any(s.memory_error for s in seeds),
                  min_served=float(np.mean([s.min_served for s in seeds])),
                  load_ms_per_step=float(np.mean([s.load_ms_per_step for s in seeds])))


def replay(runs: list[RealRun], profile: ServerProfile, seeds: int = 5, workers: int = 2,
           progress: Callable[[], object] | None = None) -> dict[int, Replay]:
    """Per run (by its idx): the twin's means over seeds."""
    jobs = [(r, profile, s) for r in runs for s in range(seeds)]
    # heavy runs first so the pool stays balanced
    jobs.sort(key=lambda j: -j[0].arrivals)
    by_run: dict[int, list[SeedReplay]] = {}
    pool = ProcessPoolExecutor(workers) if workers > 1 else None
    try:
        for one in pool.map(_replay_one, jobs, chunksize=1) if pool else map(_replay_one, jobs):
            by_run.setdefault(one.run_idx, []).append(one)
            if progress:
                progress()
    finally:
        if pool:
            pool.shutdown()
    return {idx: _mean_over_seeds(lst) for idx, lst in by_run.items()}


def expected_distinct(run: RealRun, k: float) -> float:
    """Expected distinct adapters among k requests drawn by rate, capped at A_max."""
    p = np.array(run.rate_multiset[: run.n_adapters])
    p = p / p.sum()
    return float(min(run.max_loras, np.sum(1 - (1 - p) ** max(k, 0.0))))


def calibrate(runs: list[RealRun], base: ServerProfile, workers: int = 2) -> ServerProfile:
    """Fit eos_fraction and the step-time coefficients on the given (calibration) runs, with vLLM's rules on.

    The measured ITL holds the time the real server spent loading adapters; the twin adds its own loads to
    every step, so the step coefficients are fitted to what is left of the measured ITL once the twin's
    load time per step (one replay, by the first fit, of the runs with more adapters than slots) is taken off."""
    # early stops: finished requests produced fewer output tokens than the pool's max_tokens
    losses = [1 - r.out_tokens / r.finished / r.mean_out for r in runs if not r.starved and r.finished > 0]
    eos = float(np.clip(2 * np.median(losses), 0, 1))
    base = base.with_updates(lengths={"eos_fraction": round(eos, 4), "sigma": round(fit_length_sigma(runs, base), 3)})
    first = _fit_steps(runs, base, np.zeros(len(runs)))
    swapping = [r for r in runs if r.n_adapters > r.max_loras]
    loads = replay(swapping, first, seeds=1, workers=workers) if swapping else {}
    return _fit_steps(runs, base, np.array([loads[r.idx].load_ms_per_step if r.idx in loads else 0.0 for r in runs]))


def _fit_steps(runs: list[RealRun], base: ServerProfile, load_ms_per_step: FloatArray) -> ServerProfile:
    """Least squares of the measured ITL, less the load time per step, on the step-time model."""
    from scipy.optimize import least_squares

    R = np.array([r.mean_running for r in runs])
    W = np.array([r.mean_waiting for r in runs])
    itl = np.array([r.itl_ms for r in runs]) - load_ms_per_step
    pt = np.array([r.prompt_tok_s for r in runs])
    n = np.array([expected_distinct(r, r.mean_running) for r in runs])
    # from the kernels' grid, not fitted (one half holds one max rank)
    rank_factor = np.array([expected_rank_factor(base.step, r) for r in runs])
    slots = np.array([r.max_loras + 1.0 for r in runs]) * rank_factor
    # the waiting requests the adapter rule skips (wait_counts: skipped): only a server with more
    # adapters than slots fills max_loras with waiting requests left for other adapters
    skipping = np.array([r.n_adapters > r.max_loras for r in runs], float)
    ok = np.isfinite(R) & np.isfinite(itl) & np.isfinite(W) & np.isfinite(pt)
    R, W, itl, pt, n, slots, skipping = R[ok], W[ok], itl[ok], pt[ok], n[ok], slots[ok], skipping[ok]
    s0 = base.step

    def model(x: FloatArray) -> FloatArray:
        a, b, c, l1, w, g = x
        # prompt tokens per step = prompt tokens/s * step length; solve the fixed point once
        step: FloatArray = itl.copy()
        for _ in range(3):
            P = pt * step / 1000
            step = (a + b * R + c * P) * (s0.lora_c0 + l1 * n) + w * W * skipping + g * slots
        return step

    x0 = [s0.a_ms, s0.b_ms, 0.01, s0.lora_c1, 0.0005, 0.1]
    # absolute residuals (ms): the saturated runs, whose long steps set the
    # starved throughput, weigh more than the nearly idle ones
    fit = least_squares(lambda x: model(x) - itl, x0,
                        bounds=([1, 0.0, 0.0, 0.0, 0.0, 0.0], [40, 1.0, 1.0, 0.2, 0.01, 5.0]))
    a, b, c, l1, w, g = (float(v) for v in fit.x)
    return base.with_updates(step={"a_ms": round(a, 4), "b_ms": round(b, 5), "c_ms": round(c, 5),
                                   "lora_c1": round(l1, 5), "slot_ms": round(g, 5)},
                             overhead={"wait_ms": round(w, 6), "wait_counts": "skipped"},
                             slot_fill="set_order")


def expected_rank_factor(step: StepCoefficients, run: RealRun) -> float:
    """What the max rank multiplies the LoRA costs by, on average over a measured run's steps (sim and the
    kernels' rank factor): with a LoRA grid, its share in a step of the running requests' decode tokens
    (Poisson around the measured mean) plus, in the share of steps that hold a prompt (prompt tokens per
    step, by the measured ITL, over the mean prompt), that prompt's tokens."""
    extra = -(-run.max_rank // 16) - 1
    if step.lora_grid is None:
        return 1 + step.slot_rank_share * extra
    from scipy.stats import poisson

    mean = max(run.mean_running, 1e-9)
    lo, hi = poisson.ppf([1e-4, 1 - 1e-4], mean)
    k = np.arange(max(int(lo), 1), int(hi) + 2)
    pk = poisson.pmf(k, mean)
    pk = pk / pk.sum()
    per_step = run.prompt_tok_s * run.itl_ms / 1000 if np.isfinite(run.prompt_tok_s * run.itl_ms) else 0.0
    with_prompt = min(1.0, per_step / run.mean_in)
    prompt = int(round(per_step / with_prompt)) if with_prompt > 0 else 0
    grid = step.lora_grid

    def share(tokens: IntArray) -> FloatArray:
        tokens = np.minimum(tokens, MAX_STEP_TOKENS)
        shrink = grid.shrink_slices * np.where(tokens < 128, 64, 8) * -(-tokens // 32)
        return shrink / (shrink + grid.expand_tiles * -(-tokens // 64))

    mean_share = float(pk @ ((1 - with_prompt) * share(k) + with_prompt * share(k + prompt)))
    return 1 + extra * mean_share


def kv_tokens_per_running(runs: list[RealRun]) -> float:
    """Measured KV tokens held per running request (runs not limited by KV)."""
    v = [r.kv_usage * r.kv_cache_tokens / r.mean_running for r in runs if r.mean_running > 100 and r.kv_usage < 0.85]
    return float(np.median(v))


def fit_length_sigma(runs: list[RealRun], base: ServerProfile) -> float:
    """Spread of the (lognormal) length distribution that reproduces the measured
    KV tokens per running request: long requests stay longer, so the spread of
    lengths sets how much KV a running request holds on average."""
    target = kv_tokens_per_running(runs)
    lo, hi = 0.05, 1.5
    w = Workload(ranks=np.full(32, 16), rates=np.full(32, 1.0), duration_s=600.0)
    for _ in range(7):
        mid = (lo + hi) / 2
        w.sigma = mid
        res = simulate(w, base.with_updates(lengths={"eos_fraction": 0.0}),
                       ServerConfig(max_loras=32, max_rank=16), seed=1)
        per = res.mean_kv_usage * res.kv_blocks * base.block_size / max(res.mean_running, 1e-9)
        if per > target:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


class ScoredRun(BaseModel):
    """One judged run: real beside twin beside the original twin (dt_*). Serialised by alias: the keys
    of ``tessera twin validate --out`` (bench/results/validate.json)."""

    model_config = ConfigDict(frozen=True, validate_by_name=True, serialize_by_alias=True)

    idx: int
    n_adapters: int = Field(alias="n")
    max_loras: int = Field(alias="A")
    max_rank: int = Field(alias="rank")
    rate_label: str = Field(alias="rates")
    real_throughput: float = Field(alias="real")  # tokens/s
    twin_throughput: float = Field(alias="twin")
    dt_throughput: float = Field(alias="dt")
    err: float  # |twin - real| / real
    dt_err: float  # the original twin's; NaN where it has none
    real_starved: bool
    twin_starved: bool
    dt_starved: bool
    low_rate: bool
    real_itl: float
    twin_itl: float
    real_ttft: float = float("nan")  # ms, completed requests
    twin_ttft: float = float("nan")
    seed_spread: float = float("nan")  # the twin's mean |seed - mean| / mean throughput
    twin_ratio: float  # throughput / the run's ideal (offered) throughput
    real_ratio: float
    calibrated_on: int  # the max rank of the half the twin was fitted on


def score(runs: list[RealRun], table: dict[int, Replay], calibrated_on: int) -> list[ScoredRun]:
    rows = []
    for r in runs:
        t = table[r.idx]
        ratio = t.throughput / r.ideal
        rows.append(ScoredRun(
            idx=r.idx, n_adapters=r.n_adapters, max_loras=r.max_loras, max_rank=r.max_rank, rate_label=r.rate_label,
            real_throughput=r.throughput, twin_throughput=t.throughput, dt_throughput=r.dt_throughput,
            err=abs(t.throughput - r.throughput) / r.throughput,
            dt_err=abs(r.dt_throughput - r.throughput) / r.throughput if np.isfinite(r.dt_throughput) else float("nan"),
            real_starved=r.starved, twin_starved=bool(ratio < STARVATION_RATIO), dt_starved=r.dt_starved,
            low_rate=r.low_rate, real_itl=r.itl_ms, twin_itl=t.itl_ms, real_ttft=r.ttft_ms, twin_ttft=t.ttft_ms,
            seed_spread=t.seed_spread, twin_ratio=ratio,
            real_ratio=r.throughput / r.ideal, calibrated_on=calibrated_on))
    return rows


@dataclass(frozen=True)
class ErrorSummary:
    """Throughput error and starvation agreement of a group of judged runs, the twin's beside the original's."""

    n: int
    median: float
    p90: float
    dt_median: float
    dt_p90: float
    agree: int  # runs whose starvation the twin calls as measured
    dt_agree: int


def _error_summary(rows: list[ScoredRun]) -> ErrorSummary:
    e = np.array([x.err for x in rows])
    d = np.array([x.dt_err for x in rows])
    d = d[np.isfinite(d)]
    return ErrorSummary(n=len(rows), median=float(np.median(e)) if len(e) else float("nan"),
                        p90=float(np.percentile(e, 90)) if len(e) else float("nan"),
                        dt_median=float(np.median(d)) if len(d) else float("nan"),
                        dt_p90=float(np.percentile(d, 90)) if len(d) else float("nan"),
                        agree=sum(x.real_starved == x.twin_starved for x in rows),
                        dt_agree=sum(x.real_starved == x.dt_starved for x in rows))


def summarize(rows: list[ScoredRun]) -> dict[str, ErrorSummary]:
    """By group of runs (all, starved, unstarved, low_rate, high_rate)."""
    return {"all": _error_summary(rows), "starved": _error_summary([x for x in rows if x.real_starved]),
            "unstarved": _error_summary([x for x in rows if not x.real_starved]),
            "low_rate": _error_summary([x for x in rows if x.low_rate]),
            "high_rate": _error_summary([x for x in rows if not x.low_rate])}


def cross_validate(profile: ServerProfile, runs: list[RealRun] | None = None, seeds: int = 5,
                   workers: int = 2, progress: Callable[[], object] | None = None,
                   ) -> tuple[list[ScoredRun], dict[int, ServerProfile]]:
    """Calibrate on the max-rank-16 runs, judge the max-rank-32 runs; then the reverse."""
    runs = runs if runs is not None else load_runs()
    rows: list[ScoredRun] = []
    fitted = {}
    for cal_rank, val_rank in ((16, 32), (32, 16)):
        cal = [r for r in runs if r.max_rank == cal_rank]
        val = [r for r in runs if r.max_rank == val_rank]
        p = calibrate(cal, profile)
        fitted[cal_rank] = p
        rows += score(val, replay(val, p, seeds=seeds, workers=workers, progress=progress), cal_rank)
    rows.sort(key=lambda x: x.idx)
    return rows, fitted


def validation_report(rows: list[ScoredRun], fitted: dict[int, ServerProfile]) -> dict[str, Any]:
    """What ``tessera twin validate --out`` writes (bench/results/validate.json): rows, summary, fitted profiles."""
    return {"rows": [row.model_dump() for row in rows],
            "summary": {group: asdict(stats) for group, stats in summarize(rows).items()},
            "fitted": {rank: profile.model_dump() for rank, profile in fitted.items()}}


class PredictedRun(BaseModel):
    """A real run's configuration predicted for another model by its profile alone, Qwen's measurement beside
    it. Serialised by alias: the keys of ``tessera twin predict-runs --out`` (bench/results/llama_predictions.json)."""

    model_config = ConfigDict(frozen=True, validate_by_name=True, serialize_by_alias=True)

    n_adapters: int = Field(alias="n")
    max_loras: int = Field(alias="A")
    max_rank: int = Field(alias="rank")
    low_rate: bool
    qwen_real: float  # tokens/s measured with Qwen
    twin: float  # tokens/s the twin predicts for the other model
    ratio: float  # throughput / offered
    starved: bool
    memory_error: bool


def predict_runs(runs: list[RealRun], table: dict[int, Replay]) -> list[PredictedRun]:
    """The replays of `runs` (by ``replay``) as predictions: starved when the server starts and serves
    less than STARVATION_RATIO of what it is offered."""
    predicted = []
    for r in runs:
        x = table[r.idx]
        predicted.append(PredictedRun(
            n_adapters=r.n_adapters, max_loras=r.max_loras, max_rank=r.max_rank, low_rate=r.low_rate,
            qwen_real=r.throughput, twin=x.throughput, ratio=x.ratio,
            starved=bool(x.ratio < STARVATION_RATIO) and not x.memory_error, memory_error=x.memory_error))
    return predicted
