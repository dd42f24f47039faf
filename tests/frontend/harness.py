"""In-process frontends and stub servers on loopback for the graph tests (real HTTP both ways)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from support.oip_stub import Stub, StubModel, serve_stub
from tessera.frontend.config import FrontendConfig
from tessera.frontend.server import Frontend

ONE_ROW = {"inputs": [{"name": "frame", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 1.5]}]}


def make_config(stub: Stub, tasks: dict[str, dict[str, float] | list[tuple[str, float, float]]],
                edges: list[dict] | None = None, slo_ms: float = 1000.0, **settings: Any) -> FrontendConfig:
    """tasks: name -> [(model on the stub, weight, single ms), ...] (one configuration each)."""
    return FrontendConfig.model_validate({
        "system": "demo", "sloMilliseconds": slo_ms, "hopMilliseconds": 0.0, "settings": settings,
        "tasks": [{"name": name, "configurations": [
            {"name": model, "url": stub.url(model), "weight": weight, "singleMilliseconds": single}
            for model, weight, single in configurations]} for name, configurations in tasks.items()],
        "edges": edges or []})


async def serve_frontend(frontend: Frontend) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(frontend.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def post(session: aiohttp.ClientSession, url: str, body: Any = ONE_ROW) -> tuple[int, dict, dict]:
    async with session.post(url, json=body) as response:
        return response.status, await response.json(), dict(response.headers)


Scenario = Callable[[Frontend, str, aiohttp.ClientSession], Awaitable[None]]


def run(models: dict[str, StubModel], build: Callable[[Stub], FrontendConfig], scenario: Scenario) -> Frontend:
    """Start the stub and a frontend on the config `build` makes, run the scenario, stop both."""

    async def main() -> Frontend:
        stub = await serve_stub(models)
        frontend = Frontend(build(stub))
        runner, base = await serve_frontend(frontend)
        try:
            async with aiohttp.ClientSession() as session:
                await scenario(frontend, f"{base}/v2/models/demo/infer", session)
        finally:
            await runner.cleanup()
            await stub.stop()
        return frontend

    return asyncio.run(main())


def counted(frontend: Frontend, outcome: str, reason: str = "") -> float:
    value = frontend.registry.get_sample_value("tessera_frontend_requests_total",
                                               {"system": "demo", "outcome": outcome, "reason": reason})
    return value or 0.0
