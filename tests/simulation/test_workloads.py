"""Rate traces: mean one, seeded, bursty where they should be; Poisson arrivals follow them."""

import warnings

import numpy as np
import pytest

from tessera.planner.input_files import InputError
from tessera.planner.simulation.workloads import (
    DiurnalParameters, MmppParameters, diurnal_with_bursts, mmpp, poisson_arrivals, replay_csv,
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
