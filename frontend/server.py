"""The frontend's HTTP process: Open Inference Protocol v2 at the system's entry, on aiohttp and uvloop.

Why aiohttp on uvloop: its HTTP parser is C (llhttp), and it was the
fastest of the asyncio server stacks measured on one core; the hops go
through tessera.frontend.upstream, five times cheaper per request than
aiohttp's client (bench/frontend_stack.py, bench/results/frontend_stack.md).

Paths: POST /v2/models/<system>/infer; GET /v2/health/live, /v2/health/ready,
/v2/models/<system>, /v2/models/<system>/ready; GET /metrics (Prometheus).

Every request ends in one outcome, counted by system, outcome and reason:
ok, late (answered after its deadline), dropped (reason `deadline`: early
dropping; `overload`: more than maxInFlight at once, answered 429), failed
(a task failed: 502 or 504 naming it; reason `internal`: a defect of the
frontend's own, 500, logged), invalid (the client's body: 4xx
naming the field). Hot reload: the config file is re-read when it changes
(polled) or on SIGHUP; a request keeps the graph it started with, so a
reload drops nothing in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tessera.frontend.config import FrontendConfig, load_config
from tessera.frontend.graph import Dropped, Graph, Run, TaskFailed
from tessera.frontend.tensors import BadRequest, parse_request
from tessera.frontend.upstream import Upstream
from tessera.planner.input_files import InputError

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0,
                     1.5, 2.5, 5.0, 10.0)
RELOAD_POLL_S = 1.0
MAX_ELEMENTS_PER_BYTE = 1  # a JSON element takes at least a byte: the body limit bounds the elements too


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("tessera_frontend_requests", "Client requests by outcome (dropped: with reason).",
                                ["system", "outcome", "reason"], registry=registry)
        self.latency = Histogram("tessera_frontend_request_seconds", "End-to-end latency of answered requests.",
                                 ["system"], buckets=LATENCY_BUCKETS_S, registry=registry)
        self.stage = Histogram("tessera_frontend_stage_seconds", "Latency of one hop to a task, server included.",
                               ["system", "task", "configuration"], buckets=LATENCY_BUCKETS_S, registry=registry)
        self.in_flight = Gauge("tessera_frontend_in_flight", "Client requests being carried now.", ["system"],
                               registry=registry)
        self.reloads = Counter("tessera_frontend_config_reloads", "Config reloads by result.", ["result"],
                               registry=registry)
        self._children: dict[tuple[str, ...], Any] = {}  # labels() costs a lock and a lookup per call

    def child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def count(self, system: str, outcome: str, reason: str = "") -> None:
        self.child(self.requests, system, outcome, reason).inc()

    def observe_stage(self, system: str, task: str, configuration: str, seconds: float) -> None:
        self.child(self.stage, system, task, configuration).observe(seconds)


class Frontend:
    """One system's frontend: the current graph, the metrics, the request handler."""

    def __init__(self, config: FrontendConfig, config_path: Path | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.graph = Graph(config)
        self.config_path = config_path
        self.registry = registry or CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.in_flight = 0
        self.upstream = Upstream(config.upstream_timeout_s)
        self._stamp = _stamp(config_path) if config_path else None

    # -- requests --

    async def infer(self, request: web.Request) -> web.Response:
        graph = self.graph  # this request's graph, whatever a reload does meanwhile
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        system = graph.system
        if request.match_info["model"] != system:
            return self._refuse(system, 404, f"model {request.match_info['model']!r} not found: this frontend "
                                             f"serves {system!r}")
        settings = graph.config.settings
        if self.in_flight >= settings.max_in_flight:
            self.metrics.count(system, "dropped", "overload")
            return _error(429, f"over {settings.max_in_flight} requests in flight; retry later",
                          {"Retry-After": "1"})
        self.in_flight += 1
        gauge = self.metrics.child(self.metrics.in_flight, system)
        gauge.inc()
        try:
            return await self._carry(graph, request, arrival)
        finally:
            self.in_flight -= 1
            gauge.dec()

    async def _carry(self, graph: Graph, request: web.Request, arrival: float) -> web.Response:
        system = graph.system
        settings = graph.config.settings
        try:
            body = await _read_body(request, settings.max_body_bytes)
            inputs, request_id = parse_request(body, settings.max_body_bytes * MAX_ELEMENTS_PER_BYTE)
        except BadRequest as error:
            return self._refuse(system, error.status, str(error))
        observe = self.metrics.observe_stage
        run = Run(graph, self.upstream, inputs, arrival + graph.slo_s,
                  lambda task, configuration, seconds: observe(system, task, configuration, seconds))
        try:
            outputs = await run.execute()
        except Dropped as error:
            self.metrics.count(system, "dropped", "deadline")
            return _error(503, str(error), {"Tessera-Dropped": "deadline"})
        except TaskFailed as error:
            self.metrics.count(system, "failed")
            return _error(error.status, str(error), {"Tessera-Failed-Task": error.task})
        except Exception:  # a defect of the frontend's own: counted and logged, the process serves on
            log.exception("request failed inside the frontend")
            self.metrics.count(system, "failed", "internal")
            return _error(500, "the frontend failed on this request (logged); tessera bug")
        seconds = asyncio.get_running_loop().time() - arrival
        outcome = "ok" if seconds <= graph.slo_s else "late"
        self.metrics.count(system, outcome)
        self.metrics.child(self.metrics.latency, system).observe(seconds)
        answer = {"model_name": system, "outputs": outputs, **({"id": request_id} if request_id else {})}
        return web.Response(body=orjson.dumps(answer), content_type="application/json",
                            headers={"Tessera-Outcome": outcome})

    def _refuse(self, system: str, status: int, message: str) -> web.Response:
        self.metrics.count(system, "invalid")
        return _error(status, message)

    # -- the rest of the protocol --

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def ready(self, request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    async def model(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.graph.system:
            return _error(404, f"model {request.match_info['model']!r} not found")
        return web.json_response({"name": self.graph.system, "platform": "tessera-frontend",
                                  "tasks": [t.name for t in self.graph.config.tasks]})

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- reconfiguration --

    def reload(self) -> bool:
        """Re-read the config file; a bad one is logged and counted, and the current graph stays."""
        assert self.config_path is not None
        self._stamp = _stamp(self.config_path)
        try:
            graph = Graph(load_config(self.config_path))
        except InputError as error:
            self.metrics.reloads.labels("refused").inc()
            log.error("config reload refused, still serving the previous one: %s", error)
            return False
        self.graph = graph
        self.upstream.timeout_s = graph.config.upstream_timeout_s
        self.metrics.reloads.labels("applied").inc()
        log.info("config reloaded from %s", self.config_path)
        return True

    async def watch(self, interval_s: float = RELOAD_POLL_S) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if self.config_path is not None and _stamp(self.config_path) != self._stamp:
                self.reload()

    def app(self) -> web.Application:
        # The body limit is the config's (reloadable), checked in _read_body; aiohttp's own is set above it.
        app = web.Application(client_max_size=2**31)
        app.router.add_post("/v2/models/{model}/infer", self.infer)
        app.router.add_get("/v2/health/live", self.live)
        app.router.add_get("/v2/health/ready", self.ready)
        app.router.add_get("/v2/models/{model}", self.model)
        app.router.add_get("/v2/models/{model}/ready", self.ready)
        app.router.add_get("/metrics", self.metrics_page)
        app.cleanup_ctx.append(self._background)
        return app

    async def _background(self, app: web.Application):  # type: ignore[no-untyped-def]
        watcher = asyncio.create_task(self.watch()) if self.config_path else None
        if self.config_path:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)
        yield
        if watcher:
            watcher.cancel()
        self.upstream.close()


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)  # follows the symlink a mounted ConfigMap swaps
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns, status.st_size


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None:
        if request.content_length > limit:
            raise BadRequest(f"body: {request.content_length} bytes, more than the {limit} accepted", 413)
        return await request.read()  # exactly Content-Length bytes
    chunks, size = [], 0  # chunked: counted as it comes
    async for chunk in request.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"body: more than the {limit} bytes accepted", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": message}), content_type="application/json",
                        headers=headers)


def serve(config_path: Path, host: str, port: int) -> None:
    """Run the frontend until SIGTERM/SIGINT; in-flight requests finish first (graceful shutdown)."""
    try:
        import uvloop
    except ImportError:  # the stack without uvloop works, slower
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    frontend = Frontend(load_config(config_path), config_path)
    web.run_app(frontend.app(), host=host, port=port, access_log=None, print=None, shutdown_timeout=30)
