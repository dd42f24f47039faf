"""The stall watch names the code that keeps the event loop from running."""

from __future__ import annotations

import asyncio
import logging
import time

from tessera.operator.entry.stall_watch import GcPauses, StallWatch, runqueue_wait_s


def _a_blocking_call_on_the_loop() -> None:
    time.sleep(0.4)


async def _probe_then_block(watch: StallWatch) -> None:
    watch.tick()
    await asyncio.sleep(0.01)
    watch.tick()
    _a_blocking_call_on_the_loop()
    watch.tick()


def test_a_stall_is_logged_with_the_blocking_function(caplog):
    caplog.set_level(logging.INFO, logger="tessera.operator")
    watch = StallWatch(threshold_s=0.1, period_s=0.01)

    async def main() -> None:
        watch.start()
        await _probe_then_block(watch)

    try:
        asyncio.run(main())
    finally:
        watch.stop()
    (record,) = [r for r in caplog.records if "has not run" in r.getMessage()]
    assert "_a_blocking_call_on_the_loop" in record.getMessage()
    assert "(the event loop)" in record.getMessage()


def test_a_loop_that_keeps_running_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="tessera.operator")
    watch = StallWatch(threshold_s=1.0, period_s=0.01)  # far above a busy machine's scheduling delays

    async def main() -> None:
        watch.start()
        for _ in range(20):
            watch.tick()
            await asyncio.sleep(0.01)

    try:
        asyncio.run(main())
    finally:
        watch.stop()
    assert not [r for r in caplog.records if "has not run" in r.getMessage()]


def test_the_time_waiting_for_a_cpu_is_the_second_field_of_schedstat():
    assert runqueue_wait_s("140028 2500000000 3\n") == 2.5


def _collection(pauses: GcPauses, clock: list[float], took_s: float) -> None:
    pauses("start", {"generation": 2, "collected": 0, "uncollectable": 0})
    clock[0] += took_s
    pauses("stop", {"generation": 2, "collected": 7, "uncollectable": 0})


def test_a_garbage_collection_longer_than_the_threshold_is_logged_with_its_generation(caplog):
    caplog.set_level(logging.INFO, logger="tessera.operator")
    clock = [100.0]
    _collection(GcPauses(threshold_s=0.1, clock=lambda: clock[0]), clock, 0.25)
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("garbage collection of generation 2 took 250 ms (7 objects freed, ")


def test_a_garbage_collection_within_the_threshold_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="tessera.operator")
    clock = [100.0]
    _collection(GcPauses(threshold_s=0.1, clock=lambda: clock[0]), clock, 0.05)
    assert not caplog.records
