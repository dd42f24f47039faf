"""Hysteresis on a simulated clock with scripted demand series (operator/demand/hysteresis.py)."""

from datetime import datetime, timedelta, timezone

from tessera.operator.demand.hysteresis import DemandState, Move, Windows, decide, record_repartition, repartition_allowed

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
WINDOWS = Windows(stabilization_s=300, repartition_s=600, step=0.25)
POLL = timedelta(seconds=15)


def run(series, state=None, start=T0, pods_ready=True, minimum=0.0):
    """Feeds one reading per poll; returns the decisions."""
    state = state or DemandState(100.0)
    decisions = []
    for i, reading in enumerate(series):
        decision = decide(state, reading, start + i * POLL, WINDOWS, minimum, pods_ready)
        state = decision.state
        decisions.append(decision)
    return decisions


def test_a_step_up_is_planned_for_at_the_next_reading():
    decisions = run([100, 100, 180])
    assert [d.move for d in decisions] == [Move.HOLD, Move.HOLD, Move.UP]
    assert decisions[-1].target_rps == 180


def test_a_step_down_waits_the_stabilization_window_then_takes_one_bounded_step():
    decisions = run([40] * 45)  # over 11 minutes at 40 after a plan for 100
    targets = [d.target_rps for d in decisions]
    first_down = next(i for i, d in enumerate(decisions) if d.move == Move.DOWN)
    assert first_down * POLL >= timedelta(seconds=300)
    assert all(t == 100 for t in targets[:first_down])
    assert targets[first_down] == 75  # 25% of the planned demand, not straight to 40
    second_down = next(i for i, d in enumerate(decisions) if d.move == Move.DOWN and i > first_down)
    assert (second_down - first_down) * POLL >= timedelta(seconds=300)
    assert targets[second_down] == 56.25


def test_a_scale_down_goes_no_lower_than_the_windows_peak():
    decisions = run([90, 40] + [40] * 30)
    down = next(d for d in decisions if d.move == Move.DOWN)
    assert down.target_rps == 90


def test_flapping_every_30_s_for_10_minutes_scales_up_once_and_never_down():
    series = [200 if (i * 15 // 30) % 2 else 50 for i in range(40)]
    decisions = run(series)
    moves = [d.move for d in decisions]
    assert moves.count(Move.UP) == 1 and Move.DOWN not in moves
    assert {d.target_rps for d in decisions[moves.index(Move.UP):]} == {200}


def test_unknown_holds_the_plan_and_restarts_the_window():
    decisions = run([40] * 15 + [None] + [40] * 15)
    assert Move.DOWN not in [d.move for d in decisions]
    assert decisions[15].move == Move.UNKNOWN and decisions[15].target_rps == 100
    assert decisions[16].state.below_since == T0 + 16 * POLL


def test_zero_is_idleness_and_scales_down_to_the_minimum_step_by_step():
    decisions = run([0.0] * 200, minimum=30)
    targets = sorted({d.target_rps for d in decisions}, reverse=True)
    assert targets[-1] == 30 and targets[:3] == [100, 75, 56.25]


def test_no_scale_down_while_a_pod_is_not_ready():
    decisions = run([40] * 40, pods_ready=False)
    assert {d.target_rps for d in decisions} == {100}


def test_no_scale_down_within_the_window_after_a_repartition():
    state = record_repartition(DemandState(100.0), T0)
    decisions = run([40] * 60, state=state)
    first_down = next(i for i, d in enumerate(decisions) if d.move == Move.DOWN)
    assert first_down * POLL >= timedelta(seconds=600)
    assert not repartition_allowed(state, T0 + timedelta(seconds=599), WINDOWS)
    assert repartition_allowed(state, T0 + timedelta(seconds=600), WINDOWS)


def test_a_restart_inside_the_window_resumes_it():
    before = run([40] * 12)  # 3 minutes below the plan, then the operator restarts
    kept = before[-1].state  # what status holds
    restarted = DemandState(kept.planned_rps, kept.below_since, kept.window_peak_rps, kept.last_scale_up,
                            kept.last_scale_down, kept.last_repartition, kept.last_reading)
    after = run([40] * 20, state=restarted, start=T0 + 12 * POLL)
    first_down = next(i for i, d in enumerate(after) if d.move == Move.DOWN)
    assert (12 + first_down) * POLL == timedelta(seconds=300)  # the window counted from before the restart


def test_readings_further_apart_than_half_the_window_restart_it():
    """A long solve or a restart leaves no readings in between: low readings 4 minutes apart prove nothing."""
    state = DemandState(100.0)
    for minute in (0, 4, 8):
        decision = decide(state, 40, T0 + timedelta(minutes=minute), WINDOWS)
        state = decision.state
        assert decision.move == Move.WAIT and state.below_since == T0 + timedelta(minutes=minute)
