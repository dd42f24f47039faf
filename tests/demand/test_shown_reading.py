"""What status shows of the demand readings (operator/demand/shown.py): a reading that moved, not jitter."""

from datetime import datetime, timedelta, timezone

from tessera.operator.demand.shown import ShownReading, shown_reading

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
SHOWN = ShownReading(200.0, T0)
LATER = T0 + timedelta(seconds=600)


def test_a_reading_within_the_tolerance_keeps_the_shown_reading_and_its_time():
    assert shown_reading(SHOWN, 207.9, LATER, window_open=False, refresh_s=30) == SHOWN
    assert shown_reading(SHOWN, 190.5, LATER, window_open=False, refresh_s=30) == SHOWN


def test_a_reading_beyond_the_tolerance_is_shown_at_once():
    assert shown_reading(SHOWN, 211.0, T0 + timedelta(seconds=1), window_open=False, refresh_s=30) == \
        ShownReading(211.0, T0 + timedelta(seconds=1))


def test_a_first_reading_or_one_after_unknown_is_shown():
    assert shown_reading(ShownReading(None, None), 5.0, T0, window_open=False, refresh_s=30) == ShownReading(5.0, T0)


def test_unknown_shows_no_reading():
    assert shown_reading(SHOWN, None, LATER, window_open=False, refresh_s=30) == ShownReading(None, None)


def test_any_rise_from_zero_is_shown():
    assert shown_reading(ShownReading(0.0, T0), 0.01, LATER, window_open=False, refresh_s=30).rps == 0.01


def test_an_open_scale_down_window_refreshes_the_time_for_a_restart_every_refresh_period():
    early = T0 + timedelta(seconds=29)
    assert shown_reading(SHOWN, 201.0, early, window_open=True, refresh_s=30) == SHOWN
    assert shown_reading(SHOWN, 201.0, T0 + timedelta(seconds=30), window_open=True, refresh_s=30) == \
        ShownReading(201.0, T0 + timedelta(seconds=30))
