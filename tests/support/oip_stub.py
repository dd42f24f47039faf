"""A small real Open Inference Protocol server (aiohttp, loopback) whose answers a test sets.

`StubModel` decides what one model answers: its inputs echoed back as
outputs (named `echo.<input>`), or `items` rows of an output named `items`
(a detector's list), after `delay_s`, or an HTTP `fail_status`. Every
request is recorded (its inputs and the budget header it carried), so a test
can check what the frontend sent. `serve_stub(models)` runs one server for
several models on a free port inside the caller's event loop.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from aiohttp import web

BUDGET_HEADER = "Tessera-Budget-Ms"


@dataclass
class StubModel:
    delay_s: float = 0.0
    items: int | None = None  # answer `items` rows [i, i] in an output named "items" instead of the echo
    fail_status: int | None = None
    seen: list[dict] = field(default_factory=list)  # {"inputs": [...], "budget_ms": float | None}

    def answer(self, inputs: list[dict]) -> list[dict]:
        if self.items is not None:
            return [{"name": "items", "datatype": "INT64", "shape": [self.items, 2],
                     "data": [v for i in range(self.items) for v in (i, i)]}]
        return [{**t, "name": f"echo.{t['name']}"} for t in inputs]


@dataclass
class Stub:
    runner: web.AppRunner
    port: int

    def url(self, model: str) -> str:
        return f"http://127.0.0.1:{self.port}/v2/models/{model}/infer"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def serve_stub(models: dict[str, StubModel]) -> Stub:
    async def infer(request: web.Request) -> web.Response:
        model = models[request.match_info["model"]]
        document = await request.json()
        budget = request.headers.get(BUDGET_HEADER)
        model.seen.append({"inputs": document["inputs"], "budget_ms": float(budget) if budget else None})
        if model.delay_s:
            await asyncio.sleep(model.delay_s)
        if model.fail_status:
            return web.json_response({"error": "the model broke"}, status=model.fail_status)
        return web.Response(text=json.dumps({"model_name": request.match_info["model"],
                                             "outputs": model.answer(document["inputs"])}),
                            content_type="application/json")

    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", infer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return Stub(runner, port)
