"""SIGTERM (a rolling update replacing the pod): the frontend stops taking requests and finishes those in flight."""

import asyncio
import os
import signal

import aiohttp

from support.frontend_process import start_frontend, write_config
from support.oip_stub import StubModel, serve_stub
from frontend.harness import ONE_ROW


def test_requests_in_flight_at_sigterm_are_answered_before_the_process_exits(tmp_path):
    slow = StubModel(delay_s=1.0)

    async def scenario():
        stub = await serve_stub({"slow": slow})
        config = write_config(tmp_path / "frontend.yaml", {
            "system": "stopping", "sloMilliseconds": 5000, "tasks": [{"name": "t", "configurations": [
                {"name": "c", "url": stub.url("slow"), "weight": 1, "singleMilliseconds": 1}]}]})
        frontend = await asyncio.to_thread(start_frontend, config, tmp_path / "frontend.log")
        try:
            async with aiohttp.ClientSession() as session:
                async def one():
                    async with session.post(frontend.infer_url, json=ONE_ROW) as response:
                        return response.status

                in_flight = [asyncio.create_task(one()) for _ in range(3)]
                while len(slow.seen) < 3:
                    await asyncio.sleep(0.02)
                os.kill(frontend.process.pid, signal.SIGTERM)
                statuses = await asyncio.gather(*in_flight)
            code = await asyncio.to_thread(frontend.process.wait, 15)
        finally:
            frontend.stop()
            await stub.stop()
        return statuses, code

    statuses, code = asyncio.run(scenario())
    assert statuses == [200, 200, 200]
    assert code == 0
