"""An open-loop load generator: send requests at given times, whether or not earlier ones returned."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import aiohttp
import numpy as np

START_DELAY_S = 0.3  # time to schedule every request before the first is due


@dataclass
class Measured:
    sent_s: np.ndarray  # when each request left, from the first due time
    latency_s: np.ndarray  # response time seen by the client


def one_row_request() -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0.0]}]}).encode()


def send_at(url: str, due_s: np.ndarray) -> Measured:
    """POST one single-row request at each due time (s, sorted); the times they really left and their latencies."""
    return asyncio.run(_send_all(url, due_s))


async def _send_all(url: str, due_s: np.ndarray) -> Measured:
    body = one_row_request()
    loop = asyncio.get_running_loop()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        origin = loop.time() + START_DELAY_S

        async def one(due: float) -> tuple[float, float]:
            await asyncio.sleep(origin + due - loop.time())
            sent = loop.time()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url} answered {response.status}: {await response.text()}")
            return sent - origin, loop.time() - sent

        results = await asyncio.gather(*(one(float(due)) for due in due_s))
    sent, latency = (np.array(column) for column in zip(*results))
    order = np.argsort(sent)
    return Measured(sent[order], latency[order])
