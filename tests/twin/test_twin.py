"""Invariants and mechanisms of the adapter-server twin."""

from pathlib import Path

import numpy as np
import pytest

from tessera.planner.twin import engine as twin_engine
from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sim import ServerConfig, simulate, vllm_set_order
from tessera.planner.twin.workload import Trace, Workload

VLLM_LORA = Path(__file__).resolve().parents[1] / "data" / "vllm-lora"  # vendored from shared/data
QWEN = load_profile("qwen")


def wl(n, rates, ranks=(8, 16), duration=300.0, **kw):
    k = np.arange(n)
    return Workload(ranks=np.array(ranks)[k % len(ranks)], rates=np.array(rates, float)[k % len(rates)],
                    duration_s=duration, **kw)


def trace(prompts, outputs, times=None, adapters=None):
    n = len(prompts)
    return Workload(ranks=np.array([16]), rates=np.array([1.0]), duration_s=100.0,
                    trace=Trace(t=times if times is not None else np.zeros(n),
                                adapter=adapters if adapters is not None else np.zeros(n, int),
                                prompt=prompts, output=outputs))


def _kv_tight_profile():
    # a tiny KV cache: forces preemptions (by recompute) and KV-blocked admission
    return QWEN.with_updates(memory={"c0": 40000.0 + 16 * 10 + 10, "per_rank_slot": 0.0, "per_slot": 0.0},
                             max_model_len=2048)


def test_conservation_every_arrival_accounted_for():
    prof = _kv_tight_profile()
    res = simulate(wl(64, [2.0, 1.0], duration=200), prof, ServerConfig(max_loras=16, outstanding_cap=3000),
                   seed=3, keep_requests=True)
    assert res.preemptions > 0 and res.dropped > 0  # the scenario exercises preemption and the cap
    st = res.state
    counts = {s: int((st == s).sum()) for s in range(5)}
    assert counts[twin_engine.FINISHED] == res.finished
    assert counts[twin_engine.DROPPED] == res.dropped
    assert counts[twin_engine.RUNNING] == res.running_end
    assert res.arrivals == res.finished + res.running_end + res.waiting_end + res.dropped
    assert res.arrivals == st.shape[0]


def test_kv_blocks_never_over_capacity_under_pressure():
    prof = _kv_tight_profile()
    res = simulate(wl(32, [3.0], duration=200), prof, ServerConfig(max_loras=32), seed=1)
    assert res.preemptions > 0
    assert res.max_kv_blocks <= res.kv_blocks
    assert res.max_kv_blocks >= 0.9 * res.kv_blocks  # it did fill up
    assert np.all(res.ts_kv <= 1.0 + 1e-9)


@pytest.mark.parametrize("a_max", [1, 4, 16])
def test_slots_never_over_a_max(a_max):
    res = simulate(wl(64, [0.5, 0.2]), QWEN, ServerConfig(max_loras=a_max), seed=2)
    assert res.max_adapters_in_batch == a_max  # reached, never exceeded
    assert res.max_resident <= a_max
    assert res.loads > a_max  # adapters rotate through the slots (LRU)


def test_deterministic_for_a_fixed_seed():
    a = simulate(wl(32, [0.5, 0.1]), QWEN, ServerConfig(max_loras=8), seed=7)
    b = simulate(wl(32, [0.5, 0.1]), QWEN, ServerConfig(max_loras=8), seed=7)
    c = simulate(wl(32, [0.5, 0.1]), QWEN, ServerConfig(max_loras=8), seed=8)
    assert a.summary() == b.summary()
    assert np.array_equal(a.ts_waiting, b.ts_waiting)
    assert a.summary() != c.summary()


def test_starvation_mechanism_hot_and_cold_adapter():
    # One slot: the hot adapter always has a request running, so the V1 rule skips
    # every request of the cold adapter; the 0.9 rule on total throughput hides it.
    w = Workload(ranks=np.array([16, 16]), rates=np.array([15.0, 0.3]), duration_s=600.0)
    res = simulate(w, QWEN, ServerConfig(max_loras=1), seed=0)
    assert res.served_fraction[0] > 0.95
    assert res.served_fraction[1] < 0.05
    assert not res.starved  # aggregate rule does not see it
    assert res.ratio > 0.9
    # with two slots the cold adapter is served
    res2 = simulate(w, QWEN, ServerConfig(max_loras=2), seed=0)
    assert res2.served_fraction[1] > 0.9


def test_event_driven_single_request_steps_and_chunked_prefill():
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0})
    res = simulate(trace([100], [10]), prof, ServerConfig(max_loras=1), seed=0)
    assert res.finished == 1 and res.steps == 10  # 1 prefill step + 9 decode steps
    res = simulate(trace([5000], [4]), prof, ServerConfig(max_loras=1), seed=0)
    assert res.finished == 1 and res.steps == 3 + 3  # prefill in chunks of 2048, 2048, 904
    # an idle gap is jumped over, not stepped through
    res = simulate(trace([100, 100], [10, 10], times=np.array([0.0, 90.0])), prof, ServerConfig(max_loras=1))
    assert res.finished == 2 and res.steps == 20


def test_fcfs_skip_rule_admits_later_request_of_scheduled_adapter():
    # A_max=1; adapter 0 running; a waiting request of adapter 1 arrives before another of
    # adapter 0: the later adapter-0 request is admitted first (the skip rule).
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0})
    w = Workload(ranks=np.array([16, 16]), rates=np.array([1.0, 1.0]), duration_s=100.0,
                 trace=Trace(t=np.array([0.0, 0.5, 0.6]), adapter=np.array([0, 1, 0]),
                             prompt=np.array([100, 100, 100]), output=np.array([400, 5, 5])))
    res = simulate(w, prof, ServerConfig(max_loras=1), seed=0, keep_requests=True)
    assert res.finished == 3
    # the adapter-0 request that arrived later got its first token long before adapter 1's, which
    # waits for the first one's 400 steps (about 5.4 s at the calibrated profile's 13.5 ms a step)
    assert res.ttft_s[2] < 0.5 < 3.0 < res.ttft_s[1]


def test_every_adapter_slot_lengthens_every_step_busy_or_not():
    # vLLM's LoRA kernels launch thread blocks for each of the max_loras + 1 slots every step
    one = trace(np.array([100]), np.array([50]))
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, step={"slot_ms": 0.2})
    few, many = (simulate(one, prof, ServerConfig(max_loras=a), seed=0) for a in (8, 128))
    assert many.itl_mean_ms - few.itl_mean_ms == pytest.approx(0.2 * 120, rel=1e-6)


def test_the_slot_cost_grows_with_each_16_of_max_rank_by_the_rank_share():
    one = trace(np.array([100]), np.array([50]))
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, step={"slot_ms": 0.2, "slot_rank_share": 0.5, "lora_grid": None})
    r16, r32 = (simulate(one, prof, ServerConfig(max_loras=63, max_rank=r), seed=0) for r in (16, 32))
    assert r32.itl_mean_ms - r16.itl_mean_ms == pytest.approx(0.2 * 0.5 * 64, rel=1e-6)


def _rank_cost(prof, one):
    r16, r32 = (simulate(one, prof, ServerConfig(max_loras=63, max_rank=r), seed=0) for r in (16, 32))
    return r32.itl_mean_ms - r16.itl_mean_ms


def test_with_the_lora_grid_a_small_step_s_slot_cost_grows_with_rank_by_the_shrink_kernels_share():
    # one request decoding: a step of 1 token, where the shrink kernel's 7 slices x 64 split-K blocks per 16 of
    # rank are 448 of the slot's 884 (vLLM 0.8.5 _lora_shrink, _lora_expand's 436 output tiles)
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, step={"slot_ms": 0.2})
    assert prof.step.lora_grid is not None and prof.step.slot_rank_share == 0
    extra = _rank_cost(prof, trace(np.array([100]), np.array([50])))
    assert extra == pytest.approx(0.2 * 64 * 448 / 884, rel=1e-6)


def test_with_the_lora_grid_a_step_of_128_tokens_or_more_grows_with_rank_by_the_split_k_8_share():
    # 200 requests decoding together (admitted in one step, finishing together): steps of 200 tokens, where
    # _lora_shrink splits K 8 ways over cdiv(200, 32) = 7 row blocks (7 x 8 x 7 = 392 blocks per 16 of rank)
    # and _lora_expand launches 436 x cdiv(200, 64) = 1744
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, step={"slot_ms": 0.2})
    many = trace(np.full(200, 8), np.full(200, 50))
    extra = _rank_cost(prof, many)
    assert extra == pytest.approx(0.2 * 64 * 392 / (392 + 1744), rel=1e-6)


def test_a_profile_with_both_rank_rules_for_the_slot_cost_is_refused():
    with pytest.raises(ValueError, match="slot_rank_share and lora_grid"):
        QWEN.with_updates(step={"slot_rank_share": 0.5})


def test_waiting_requests_cost_scheduler_time_only_where_the_adapter_rule_skips_them():
    # a queue builds on a small KV cache; with a slot per adapter the rule never skips a request,
    # so "skipped" costs what no per-waiting cost does, and with fewer slots than adapters it costs more
    prof = _kv_tight_profile().with_updates(overhead={"wait_ms": 0.05, "wait_counts": "skipped"})
    free = prof.with_updates(overhead={"wait_ms": 0.0})
    w = wl(16, [2.0], duration=120)
    cfg = ServerConfig(max_loras=16)
    assert simulate(w, prof, cfg, seed=1).summary() == simulate(w, free, cfg, seed=1).summary()
    few = ServerConfig(max_loras=4)
    skipped, none = simulate(w, prof, few, seed=1), simulate(w, free, few, seed=1)
    assert skipped.mean_waiting > 0 and skipped.itl_mean_ms > none.itl_mean_ms


def test_memory_refusal_and_model():
    assert QWEN.refuses_to_start(256, 32) and not QWEN.refuses_to_start(224, 32)
    llama = load_profile("llama")
    assert llama.refuses_to_start(128, 32) and not llama.refuses_to_start(96, 32)
    res = simulate(wl(8, [0.1], ranks=(32,)), QWEN, ServerConfig(max_loras=256), seed=0)
    assert res.memory_error and res.finished == 0


def test_memory_model_reproduces_kv_capacity_refusals():
    from tessera.planner.twin.profile import fit_memory_model, read_kv_capacity
    path = VLLM_LORA / "kv_capacity.csv"
    for name in ["qwen", "llama"]:
        prof = load_profile(name)
        rows = read_kv_capacity(path, prof.model)
        assert len(rows) == 42
        for row in rows:
            a, r, y = row.max_loras, row.max_lora_rank, row.gpu_kv_cache_tokens
            assert prof.refuses_to_start(a, r) == (y is None), (name, a, r)
            if y is not None:
                assert abs(prof.kv_tokens(a, r) - y) / y < 0.08
        # the shipped coefficients are the documented fit
        fit = fit_memory_model(rows)
        for k, v in fit.model_dump().items():
            assert getattr(prof.memory, k) == pytest.approx(v, rel=1e-3)


def test_memory_model_check_counts_measured_and_predicted_refusals():
    from tessera.planner.twin.profile import check_memory_model, read_kv_capacity
    for name, refused in [("qwen", 5), ("llama", 14)]:
        prof = load_profile(name)
        check = check_memory_model(prof, read_kv_capacity(VLLM_LORA / "kv_capacity.csv", prof.model))
        assert (check.configs, check.refused_measured, check.refused_predicted, check.agree) == (42, refused, refused, 42)
        assert 0 < check.median_error <= check.max_error < 0.08


def test_outputs_present():
    res = simulate(wl(16, [0.5]), QWEN, ServerConfig(max_loras=8), seed=0)
    assert res.offered_tok_s > 0 and 0 < res.ratio <= 1.05
    assert np.isfinite([res.ttft_mean_ms, res.ttft_p99_ms, res.itl_mean_ms, res.itl_p99_ms]).all()
    assert res.itl_p99_ms >= res.itl_mean_ms * 0.8
    assert len(res.ts_running) == len(res.ts_waiting) == len(res.ts_kv) == len(res.ts_t)
    assert res.served_fraction.shape == (16,)


def _swap_at_a_full_batch(order):
    """Two slots; adapters 0 and 1 run, a request of adapter 2 waits (the set is full) until adapter 0's
    request ends, then joins adapter 1's in the next step: (workload, seed whose vLLM set order is `order`)."""
    w = Workload(ranks=np.array([16, 16, 16]), rates=np.ones(3), duration_s=100.0,
                 trace=Trace(t=np.array([0.0, 0.0, 0.01]), adapter=np.array([0, 1, 2]),
                             prompt=np.array([10, 10, 10]), output=np.array([5, 200, 5])))
    seed = next(s for s in range(200) if list(vllm_set_order(3, s)) == order)
    return w, seed


def test_a_load_evicts_the_batchs_own_adapter_when_the_pass_reaches_the_newcomer_first():
    # vLLM's pass over the step's adapters touches each in the set's order; adapter 2 is reached before
    # adapter 1, whose slot is then the least recently touched (the last step touched 1 before 0): 2 takes
    # it, and 1 is loaded again, into 0's slot. Two loads in that step, where "outside the batch" needs one.
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, slot_fill="set_order")
    w, seed = _swap_at_a_full_batch([2, 1, 0])
    res = simulate(w, prof, ServerConfig(max_loras=2), seed=seed)
    assert res.finished == 3 and res.loads == 2 + 2
    outside = simulate(w, prof.with_updates(slot_fill="outside_batch"), ServerConfig(max_loras=2), seed=seed)
    assert outside.finished == 3 and outside.loads == 2 + 1


def test_a_load_evicts_the_adapter_that_left_when_it_is_the_least_recently_touched():
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, slot_fill="set_order")
    w, seed = _swap_at_a_full_batch([0, 1, 2])  # the last step touched 0 before 1: 0's slot is the oldest
    res = simulate(w, prof, ServerConfig(max_loras=2), seed=seed)
    assert res.finished == 3 and res.loads == 2 + 1


def test_every_load_blocks_its_step_for_the_adapters_load_time():
    prof = QWEN.with_updates(lengths={"eos_fraction": 0.0}, slot_fill="set_order")
    w, seed = _swap_at_a_full_batch([2, 1, 0])
    res = simulate(w, prof, ServerConfig(max_loras=2), seed=seed)
    assert res.load_ms == pytest.approx(res.loads * QWEN.load_time_ms(16))
    free = simulate(w, prof.with_updates(load_ms={16: 0.0}), ServerConfig(max_loras=2), seed=seed)
    assert res.itl_mean_ms > free.itl_mean_ms


@pytest.mark.parametrize("vllm_rules", [False, True], ids=["published", "vllm-rules"])
def test_c_and_numba_builds_give_identical_results(monkeypatch, vllm_rules):
    from tessera.planner.twin import ckernel

    if ckernel.load() is None:
        pytest.skip("no C compiler")
    prof = _kv_tight_profile()
    if vllm_rules:
        prof = prof.with_updates(step={"slot_ms": 0.2}, slot_fill="set_order",
                                 overhead={"wait_ms": 0.01, "wait_counts": "skipped"})
    w = wl(48, [2.0, 0.5, 0.1], duration=120)
    # max rank 32 under vLLM's rules: the slot cost's rank factor by the LoRA grid, step by step
    cfg = ServerConfig(max_loras=8, outstanding_cap=2000, max_rank=32 if vllm_rules else None)
    monkeypatch.setenv("TESSERA_TWIN_ENGINE", "c")
    a = simulate(w, prof, cfg, seed=5)
    monkeypatch.setenv("TESSERA_TWIN_ENGINE", "numba")
    b = simulate(w, prof, cfg, seed=5)
    assert a.preemptions > 0
    assert a.summary() == b.summary()
    assert np.array_equal(a.ts_kv, b.ts_kv) and np.array_equal(a.served_fraction, b.served_fraction, equal_nan=True)


@pytest.mark.parametrize("engine", ["c", "numba"])
def test_progress_reporting_run_is_bit_identical(monkeypatch, engine):
    """A run polled for progress (kernel in a worker thread) gives exactly the plain run's
    results, and the reported simulated time rises to the duration."""
    from tessera.planner.twin import ckernel

    if engine == "c" and ckernel.load() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("TESSERA_TWIN_ENGINE", engine)
    prof = _kv_tight_profile()
    w = wl(48, [2.0, 0.5, 0.1], duration=120)
    cfg = ServerConfig(max_loras=8, outstanding_cap=2000)
    a = simulate(w, prof, cfg, seed=5, keep_requests=True)
    seen: list[float] = []
    b = simulate(w, prof, cfg, seed=5, keep_requests=True, progress=seen.append, poll_s=0.0005)
    assert a.summary() == b.summary() and a.steps == b.steps
    for k in ("state", "ttft_s", "ts_running", "ts_waiting", "ts_kv", "served_fraction"):
        assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True), k
    assert seen and seen == sorted(seen) and seen[-1] >= 120.0


def test_progress_is_reported_during_the_run():
    """The kernel publishes its simulated time while it runs (not only at the end)."""
    seen: list[float] = []
    w = wl(384, [1.6, 0.8, 0.4], ranks=(8, 16, 32), duration=600)
    simulate(w, QWEN, ServerConfig(max_loras=16, outstanding_cap=26000), seed=0, progress=seen.append,
             poll_s=0.005)
    mid = [t for t in seen if 0 < t < 600]
    assert len(mid) >= 2, seen[:5]


def test_calibration_fits_vllms_rules_to_the_measured_itl_less_the_twins_own_load_time(monkeypatch):
    # the real ITL holds the real server's adapter loads and the twin adds its own to every step:
    # a first fit replays the runs with more adapters than slots, the second fits what is left
    from tessera.planner.twin import validate

    fitted_on = []
    fit_steps = validate._fit_steps

    def spy(runs, base, load_ms_per_step):
        fitted_on.append(load_ms_per_step.copy())
        return fit_steps(runs, base, load_ms_per_step)

    monkeypatch.setattr(validate, "_fit_steps", spy)
    runs = [r for r in validate.load_runs(VLLM_LORA / "qwen_runs.csv") if r.low_rate][:12]
    profile = validate.calibrate(runs, QWEN, workers=1)
    assert profile.slot_fill == "set_order" and profile.overhead.wait_counts == "skipped"
    first, second = fitted_on
    swapping = np.array([r.n_adapters > r.max_loras for r in runs])
    assert swapping.any() and not swapping.all()
    assert not first.any()
    assert (second[swapping] > 0).all() and not second[~swapping].any()


def test_calibration_takes_each_runs_rank_factor_from_the_lora_grid_at_the_runs_batch():
    from tessera.planner.twin import validate

    runs = [r for r in validate.load_runs(VLLM_LORA / "qwen_runs.csv") if r.max_rank == 32]
    idle = min(runs, key=lambda r: r.mean_running)  # about one request running: steps of a few tokens
    full = max(runs, key=lambda r: r.mean_running)  # hundreds running: steps of >= 128 tokens
    assert validate.expected_rank_factor(QWEN.step, idle) == pytest.approx(1 + 448 / 884, abs=0.01)
    assert 1.15 < validate.expected_rank_factor(QWEN.step, full) < 1.21
    constant = QWEN.step.model_copy(update={"lora_grid": None, "slot_rank_share": 0.507})
    assert validate.expected_rank_factor(constant, full) == pytest.approx(1.507)
