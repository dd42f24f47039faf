"""When a pending reconcile runs: after a quiet `debounce_s`, or at the latest MAX_WAIT_FACTOR x `debounce_s` after the
first trigger it collects; a requeue counted from the start of the reconcile that asked for it (operator/entry/controller.py)."""

import pytest

from tessera.operator.entry.controller import MAX_WAIT_FACTOR, requeue_delay_s, wait_left_s


def test_a_lone_trigger_waits_the_debounce():
    assert wait_left_s(now=10.0, first_trigger=10.0, last_trigger=10.0, debounce_s=1.0) == 1.0


def test_a_trigger_inside_the_debounce_restarts_the_quiet_time():
    assert wait_left_s(now=10.5, first_trigger=10.0, last_trigger=10.4, debounce_s=1.0) == pytest.approx(0.9)


def test_a_steady_stream_of_triggers_still_gets_a_reconcile_at_the_longest_wait():
    first, step, debounce = 100.0, 0.2, 1.0
    triggers = [round(first + i * step, 6) for i in range(1000)]  # a trigger every 0.2 s for 200 s
    runs = [t for t in triggers if wait_left_s(t, first, last_trigger=t, debounce_s=debounce) == 0]
    assert runs and runs[0] - first == pytest.approx(MAX_WAIT_FACTOR * debounce)


def test_no_debounce_runs_at_once():
    assert wait_left_s(now=10.0, first_trigger=10.0, last_trigger=10.0, debounce_s=0.0) == 0.0


def test_a_resync_long_after_the_last_trigger_runs_at_once():
    assert wait_left_s(now=500.0, first_trigger=400.0, last_trigger=400.0, debounce_s=1.0) == 0.0


def test_a_requeue_counts_from_the_start_of_the_reconcile_that_asked_for_it():
    # a MIG config written at the start propagates 1.5 s while 1.2 s of statuses are written
    assert requeue_delay_s(requeue_after=1.5, took_s=1.2, debounce_s=0.1) == pytest.approx(0.3)


def test_a_reconcile_longer_than_its_requeue_leaves_the_debounce_before_the_next():
    assert requeue_delay_s(requeue_after=2.0, took_s=2.9, debounce_s=1.0) == 1.0


def test_a_requeue_shorter_than_the_debounce_waits_only_itself_after_a_long_reconcile():
    assert requeue_delay_s(requeue_after=0.2, took_s=3.0, debounce_s=1.0) == 0.2
