"""Shared by the frontend benchmarks: a minimal stub backend, an open-loop and a closed-loop load generator.

The stub (`python -P bench/frontend_load.py stub PORT`) is a bare asyncio
protocol answering every POST with one fixed inference response over
keep-alive, so the backend is never what saturates. The load generators use
raw asyncio streams, not an HTTP library, so that they cost the client core
as little as possible.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import numpy as np

RESPONSE_BODY = b'{"model_name":"stub","outputs":[{"name":"y","shape":[1,1],"datatype":"FP32","data":[1.0]}]}'
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(RESPONSE_BODY)).encode() + b"\r\n\r\n" + RESPONSE_BODY)
REQUEST_BODY = b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[0.5]}]}'


class StubProtocol(asyncio.Protocol):
    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = _content_length(self.buffer[:head_end + 2])
            if len(self.buffer) < head_end + 4 + length:
                return
            self.buffer = self.buffer[head_end + 4 + length:]
            self.transport.write(RESPONSE)


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"content-length:")
    return int(lower[at + 15:lower.find(b"\r\n", at)]) if at >= 0 else 0


def request_bytes(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(REQUEST_BODY)}\r\n\r\n").encode() + REQUEST_BODY


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    await reader.readexactly(_content_length(head))
    return status


async def open_loop(port: int, path: str, rate_rps: float, count: int, seed: int = 0,
                    connections: int = 256) -> np.ndarray:
    """Poisson arrivals at `rate_rps`; latency (s) of each request, NaN where not 200.

    A pool of keep-alive connections; a request due while all are busy opens
    no new one but waits for the next free (counted in its latency: the
    client's view).
    """
    loop = asyncio.get_running_loop()
    request = request_bytes(path)
    pool: asyncio.Queue = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    due = np.cumsum(np.random.default_rng(seed).exponential(1 / rate_rps, count))
    latency = np.full(count, np.nan)
    origin = loop.time() + 0.1

    async def one(i: int) -> None:
        reader, writer = await pool.get()
        try:
            status = await _one(reader, writer, request)
        finally:
            pool.put_nowait((reader, writer))
        if status == 200:
            latency[i] = loop.time() - (origin + due[i])

    tasks = []
    for i in range(count):
        delay = origin + due[i] - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait()[1].close()
    return latency


async def one_at_a_time(port: int, path: str, count: int) -> np.ndarray:
    """Latency (s) of `count` requests sent one after another on one connection: no queueing anywhere."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = request_bytes(path)
    latency = np.full(count, np.nan)
    for i in range(count):
        started = loop.time()
        if await _one(reader, writer, request) == 200:
            latency[i] = loop.time() - started
    writer.close()
    return latency


async def closed_loop(port: int, path: str, concurrency: int, seconds: float) -> tuple[float, int]:
    """Requests/s answered 200, and their count, with `concurrency` clients each sending the next when the last
    returns."""
    request = request_bytes(path)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    done = [0]

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while loop.time() < end:
            if await _one(reader, writer, request) == 200:
                done[0] += 1
        writer.close()

    started = loop.time()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done[0] / (loop.time() - started), done[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (robust to a contended machine, unlike wall-clock rates)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> dict[str, float]:
    values = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            import socket
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port}")


def serve_stub(port: int) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(StubProtocol, "127.0.0.1", port, backlog=1024))
    print(f"stub on {port}, pid {os.getpid()}", flush=True)
    loop.run_until_complete(server.serve_forever())


if __name__ == "__main__" and sys.argv[1:2] == ["stub"]:
    serve_stub(int(sys.argv[2]))
