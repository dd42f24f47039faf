"""Which asyncio HTTP stack the frontend runs on: CPU per request of each candidate, side by side in one run.

    .venv/bin/python -P bench/frontend_stack.py [--seconds 3]

Servers (each pinned to --server-core, answering a fixed inference response
after reading and parsing the JSON body, the frontend's own first step):
aiohttp.web on uvloop, aiohttp.web on asyncio's own loop, uvicorn on uvloop
(its pure-Python h11 parser: httptools is not installed) with a bare ASGI
app. Clients (the frontend's hop, against bench/frontend_load.py's stub):
aiohttp's ClientSession and tessera.frontend.upstream, both on uvloop.
Each runs closed loop (32 at once) for --seconds; the figure is requests
per CPU-second of the measured process, which a contended machine does not
change as it changes wall-clock rates. Writes bench/results/frontend_stack.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontend_load import REQUEST_BODY, RESPONSE_BODY, closed_loop, cpu_seconds, wait_port

RESULTS = Path(__file__).resolve().parent / "results"
SERVERS = ("aiohttp-uvloop", "aiohttp-asyncio", "uvicorn-h11-uvloop")
CLIENTS = ("aiohttp-client", "tessera-upstream")
URL_PATH = "/v2/models/stub/infer"


def serve(stack: str, port: int) -> None:
    if stack.startswith("aiohttp"):
        from aiohttp import web

        async def infer(request: web.Request) -> web.Response:
            orjson.loads(await request.read())
            return web.Response(body=RESPONSE_BODY, content_type="application/json")

        app = web.Application()
        app.router.add_post("/v2/models/{model}/infer", infer)
        if stack == "aiohttp-uvloop":
            import uvloop
            uvloop.install()
        web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
    else:
        import uvicorn

        async def asgi(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] != "http":
                return
            body, more = b"", True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            orjson.loads(body)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(RESPONSE_BODY)).encode())]})
            await send({"type": "http.response.body", "body": RESPONSE_BODY})

        uvicorn.run(asgi, host="127.0.0.1", port=port, loop="uvloop", http="h11", log_level="warning",
                    access_log=False)


async def client_rate(kind: str, port: int, seconds: float, concurrency: int = 32) -> tuple[float, float]:
    """(requests/s, requests per CPU-second of this process) for one client kind against the stub."""
    url = f"http://127.0.0.1:{port}{URL_PATH}"
    headers = {"Content-Type": "application/json"}
    if kind == "aiohttp-client":
        import aiohttp
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def post() -> None:
            async with session.post(url, data=REQUEST_BODY, headers=headers) as response:
                await response.read()
    else:
        from tessera.frontend.upstream import Upstream
        upstream = Upstream(30.0)

        async def post() -> None:
            await upstream.post(url, REQUEST_BODY, headers)

    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    done = [0]

    async def worker() -> None:
        while loop.time() < end:
            await post()
            done[0] += 1

    cpu, wall = time.process_time(), loop.time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu, loop.time() - wall
    if kind == "aiohttp-client":
        await session.close()
    return done[0] / wall, done[0] / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.client_core})
    here = Path(__file__).resolve()
    servers = {}
    for position, stack in enumerate(SERVERS):
        port = 18750 + position
        process = subprocess.Popen(["taskset", "-c", str(args.server_core), sys.executable, "-P", str(here),
                                    "serve", stack, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_port(port)
            cpu = cpu_seconds(process.pid)
            rate, answered = asyncio.run(closed_loop(port, URL_PATH, 32, args.seconds))
            servers[stack] = {"wall_rps": rate, "rps_per_cpu_second": answered / (cpu_seconds(process.pid) - cpu)}
        finally:
            process.terminate()
            process.wait(timeout=10)
    stub = subprocess.Popen(["taskset", "-c", str(args.server_core), sys.executable, "-P",
                             str(here.with_name("frontend_load.py")), "stub", "18760"], stdout=subprocess.DEVNULL)
    try:
        wait_port(18760)
        import uvloop
        clients = {}
        for kind in CLIENTS:
            wall, per_cpu = uvloop.run(client_rate(kind, 18760, args.seconds))
            clients[kind] = {"wall_rps": wall, "rps_per_cpu_second": per_cpu}
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    result = {"servers": servers, "clients": clients, "load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "seconds": args.seconds}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "frontend_stack.json").write_text(json.dumps(result, indent=2))
    lines = ["| side | stack | requests per CPU-second | wall-clock req/s (contended) |", "|---|---|---|---|"]
    lines += [f"| server | {k} | {v['rps_per_cpu_second']:.0f} | {v['wall_rps']:.0f} |" for k, v in servers.items()]
    lines += [f"| client | {k} | {v['rps_per_cpu_second']:.0f} | {v['wall_rps']:.0f} |" for k, v in clients.items()]
    lines += ["", f"Load average {', '.join(f'{x:.1f}' for x in result['load_average'])} on {result['cpus']} CPUs.",
              ""]
    (RESULTS / "frontend_stack.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
