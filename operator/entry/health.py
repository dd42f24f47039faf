"""The probes: /healthz (the loop answers and, when leading, reconciles succeed) and /readyz."""

from __future__ import annotations

import time

from aiohttp import web

from tessera.operator.entry.controller import Controller
from tessera.operator.entry.leader import LeaderElector
from tessera.operator.settings import OperatorSettings

STALE_AFTER_RESYNCS = 5
"""Liveness fails when no reconcile succeeded for this many resync periods."""


async def start_probes(controller: Controller, settings: OperatorSettings, elector: LeaderElector) -> web.AppRunner:
    """/healthz: the loop answers and (when leading) reconciles succeed; /readyz: the first reconcile is done,
    or this operator is a standby (ready to take over: a rolling update must not wait for it to lead)."""

    async def healthz(_request):
        if not elector.may_write():
            return web.Response(text="standby\n")
        stale = time.monotonic() - controller.last_success > STALE_AFTER_RESYNCS * settings.resync_s
        return web.Response(status=500 if stale and not controller.reconciling else 200,
                            text="stale\n" if stale else "ok\n")

    async def readyz(_request):
        if not elector.may_write():
            return web.Response(text="standby\n")
        return web.Response(status=200 if controller.ready else 503, text="ready\n" if controller.ready else "starting\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", settings.health_port).start()
    return runner
