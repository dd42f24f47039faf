"""Switching plans under load: a real `tessera frontend` re-reads its config and drops nothing in flight."""

import asyncio

import aiohttp

from support.frontend_process import start_frontend, write_config
from support.oip_stub import StubModel, serve_stub
from frontend.harness import ONE_ROW

RATE_RPS = 80
DURATION_S = 4.0
SWITCH_AT_S = 1.5


def plan_config(url: str, configuration: str) -> dict:
    return {"system": "switching", "sloMilliseconds": 2000, "tasks": [{"name": "t", "configurations": [
        {"name": configuration, "url": url, "weight": 1, "singleMilliseconds": 1}]}]}


def test_a_plan_switch_under_load_answers_every_request_and_moves_new_ones_to_the_new_plan(tmp_path):
    old, new = StubModel(delay_s=0.25), StubModel(delay_s=0.01)  # the old plan's requests are long in flight

    async def scenario() -> list[int]:
        stub = await serve_stub({"old": old, "new": new})
        config = write_config(tmp_path / "frontend.yaml", plan_config(stub.url("old"), "old-plan"))
        frontend = await asyncio.to_thread(start_frontend, config, tmp_path / "frontend.log")
        try:
            loop = asyncio.get_running_loop()
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                async def one(delay: float) -> int:
                    await asyncio.sleep(delay)
                    async with session.post(frontend.infer_url, json=ONE_ROW) as response:
                        await response.read()
                        return response.status

                async def switch() -> None:
                    await asyncio.sleep(SWITCH_AT_S)
                    write_config(config, plan_config(stub.url("new"), "new-plan"))
                    started = loop.time()
                    while not new.seen and loop.time() - started < 3:
                        await asyncio.sleep(0.02)

                sends = [one(i / RATE_RPS) for i in range(int(RATE_RPS * DURATION_S))]
                statuses = await asyncio.gather(*sends, switch())
            metrics = await asyncio.to_thread(frontend.metrics)
        finally:
            frontend.stop()
            await stub.stop()
        assert 'tessera_frontend_config_reloads_total{result="applied"} 1.0' in metrics
        return [s for s in statuses if s is not None]

    statuses = asyncio.run(scenario())
    assert statuses == [200] * int(RATE_RPS * DURATION_S)
    assert len(old.seen) > RATE_RPS * SWITCH_AT_S * 0.5  # the old plan carried the first part
    assert len(new.seen) > RATE_RPS * (DURATION_S - SWITCH_AT_S - 1.0)  # the new plan the rest, within the poll
    assert len(old.seen) + len(new.seen) == len(statuses)
