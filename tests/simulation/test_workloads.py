"""Rate traces: mean one, seeded, bursty where they should be; Poisson arrivals follow them."""

import io
import warnings
from importlib import resources

import numpy as np
import pytest

from tessera.planner.input_files import InputError
from tessera.planner.simulation.workloads import (
    DiurnalParameters, MmppParameters, azure_llm_2023, built_in, diurnal_with_bursts, mmpp, poisson_arrivals,
    replay_csv,
)


@pytest.mark.parametrize("make", [mmpp, diurnal_with_bursts])
def test_built_in_traces_have_mean_one_and_repeat_with_their_seed(make):
    first, second = make(3600), make(3600)
    assert first.multiplier.mean() == pytest.approx(1.0)
    assert np.array_equal(first.multiplier, second.multiplier)


def test_mmpp_visits_its_levels_in_proportion_to_their_dwell_times():
    parameters = MmppParameters(levels=(1.0, 3.0), mean_dwell_s=(30.0, 10.0))
    trace = mmpp(200_000, parameters)
    # Time share of the high level: 10 / 40; the unscaled mean 1 x 0.75 + 3 x 0.25 = 1.5.
    high = trace.multiplier > trace.multiplier.mean() * 1.5
    assert high.mean() == pytest.approx(0.25, abs=0.02)


def test_diurnal_trace_peaks_mid_trace_and_has_bursts_above_the_curve():
    trace = diurnal_with_bursts(3600, DiurnalParameters(bursts_per_hour=0))
    assert trace.multiplier.argmax() == pytest.approx(1800, abs=5)
    bursty = diurnal_with_bursts(3600)
    assert (bursty.multiplier / bursty.multiplier.mean() - trace.multiplier).max() > 0.3


def test_replay_holds_each_rate_until_the_next_sample_and_rescales_to_mean_one(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("time_s,rate\n0,10\n2,30\n4,30\n")
    trace = replay_csv(path)
    assert list(trace.multiplier) == pytest.approx([0.5, 0.5, 1.5, 1.5])


def test_poisson_arrivals_follow_the_trace():
    trace = mmpp(2000)
    arrivals = poisson_arrivals(trace, 100.0, np.random.default_rng(1))
    assert np.all(np.diff(arrivals) >= 0)
    counts = np.bincount(arrivals.astype(int), minlength=len(trace.multiplier))
    assert np.corrcoef(counts, trace.multiplier)[0, 1] > 0.95


def test_replay_of_huge_finite_rates_keeps_its_shape_without_a_warning(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("time_s,rate\n0,1e308\n2,3e307\n4,3e307\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = replay_csv(path)
    assert list(trace.multiplier) == pytest.approx([10 / 6.5, 10 / 6.5, 3 / 6.5, 3 / 6.5])


@pytest.mark.parametrize("content, words", [
    (b"time_s,rate\n0,1\n\x00\x01", "a binary file"),
    (b"time_s,rate\n0,0\n4,2\n", "every rate is 0"),
    (b"when,how_much\n0,1\n1,1\n", "header"),
], ids=["binary", "all-zero", "header"])
def test_replay_refuses_a_file_it_cannot_use_naming_it(tmp_path, content, words):
    path = tmp_path / "rates.csv"
    path.write_bytes(content)
    with pytest.raises(InputError, match=words) as error:
        replay_csv(path)
    assert str(error.value).startswith(str(path))


# The Azure LLM inference trace 2023 as recorded (vidur 0.0.26's data/processed_traces/splitwise_*.csv):
# requests, seconds from the first arrival to the last, and the coefficient of variation of the inter-arrival times.
AZURE_RECORDED = {"conv": (19_366, 3501.72, 1.094), "code": (8_819, 3435.95, 13.15)}


@pytest.mark.parametrize("service", sorted(AZURE_RECORDED))
def test_committed_azure_counts_hold_every_recorded_request_in_its_second(service):
    requests, last_arrival_s, _ = AZURE_RECORDED[service]
    data = resources.files("tessera.planner").joinpath("data", f"azure_llm_2023_{service}.csv")
    seconds, counts = np.loadtxt(io.StringIO(data.read_text()), delimiter=",", skiprows=1, unpack=True)
    assert counts.sum() == requests
    assert seconds[-2] == int(last_arrival_s) and counts[-2] > 0  # the last second with arrivals, then the end


@pytest.mark.parametrize("service", sorted(AZURE_RECORDED))
def test_poisson_arrivals_on_the_azure_trace_keep_its_recorded_burstiness(service):
    requests, last_arrival_s, recorded_cv = AZURE_RECORDED[service]
    trace = azure_llm_2023(service, int(last_arrival_s) + 1)
    gaps = np.diff(poisson_arrivals(trace, requests / trace.duration_s, np.random.default_rng(3)))
    assert gaps.std() / gaps.mean() == pytest.approx(recorded_cv, rel=0.05)


def test_azure_trace_scales_to_a_systems_demand():
    trace = built_in("azure-conv", 900)
    arrivals = poisson_arrivals(trace, 40.0, np.random.default_rng(5))
    assert arrivals.size / trace.duration_s == pytest.approx(40.0, rel=0.02)
    # The recorded shape survives the scaling: per-minute counts follow the trace's per-minute rate.
    minutes = np.bincount((arrivals // 60).astype(int), minlength=15)
    assert np.corrcoef(minutes, trace.multiplier.reshape(15, 60).sum(axis=1))[0, 1] > 0.95


def test_azure_trace_refuses_more_than_its_recorded_hour_naming_it():
    with pytest.raises(ValueError, match="'azure-conv' covers 3502 s; asked for 7200 s"):
        built_in("azure-conv", 7200)
