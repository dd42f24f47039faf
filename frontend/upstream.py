"""The frontend's HTTP/1.1 client to the task servers: keep-alive connections on asyncio protocols.

The frontend's CPU per hop is mostly the client's: aiohttp's ClientSession
spent about a quarter of the frontend's time per request in its request and
response objects (a profile of bench/frontend_overhead.py's 1-hop system).
This client does only what a hop needs: POST a JSON body to a server on a
kept-alive connection and read its status and body (Content-Length or
chunked). A connection goes back to its origin's idle pool only after a
complete response; any error, timeout or `Connection: close` closes it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
MAX_RESPONSE_BYTES = 64 << 20  # a task answer beyond this fails the hop: the frontend's memory stays bounded


class UpstreamError(Exception):
    """The server could not be reached, or broke the protocol."""


class _StaleConnection(UpstreamError):
    """A reused connection closed before any byte of the answer."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str
    authority: str

    @classmethod
    def parse(cls, url: str) -> "Target":
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url}: only http://host[:port]/path is supported")
        port = parts.port or 80
        return cls(parts.hostname, port, parts.path or "/", parts.netloc)


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.received = False  # any byte of the current exchange's answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass, but is one

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.received = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _more(self) -> None:
        if self.closed:
            raise UpstreamError("the server closed the connection")
        self.waiter = asyncio.get_running_loop().create_future()
        await self.waiter
        self.waiter = None

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send one request; its status, body and whether the connection may be reused."""
        assert self.transport is not None
        self.received = False
        self.transport.write(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise UpstreamError("response head too large")
            await self._more()
        head = bytes(self.buffer[:end]).decode("latin-1")
        del self.buffer[:end + 4]
        lines = head.split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise UpstreamError(f"not an HTTP response: {lines[0][:80]!r}") from None
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return status, await self._chunked(), keep
        if "content-length" not in headers:
            raise UpstreamError("response without Content-Length or chunked encoding")
        length = int(headers["content-length"])
        if length > MAX_RESPONSE_BYTES:
            raise UpstreamError(f"response of {length} bytes")
        while len(self.buffer) < length:
            await self._more()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return status, body, keep

    async def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            while (end := self.buffer.find(b"\r\n")) < 0:
                await self._more()
            size = int(bytes(self.buffer[:end]).split(b";")[0], 16)
            del self.buffer[:end + 2]
            while len(self.buffer) < size + 2:
                await self._more()
            body += self.buffer[:size]
            del self.buffer[:size + 2]
            if len(body) > MAX_RESPONSE_BYTES:
                raise UpstreamError("response too large")
            if size == 0:
                # trailers, if any, end with an empty line; servers that send none end right here
                return bytes(body)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class Upstream:
    """Pools of idle keep-alive connections, one per server (host, port)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.idle: dict[tuple[str, int], list[_Connection]] = {}
        self.targets: dict[str, Target] = {}

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        target = self.targets.get(url)
        if target is None:
            target = self.targets[url] = Target.parse(url)
        head = (f"POST {target.path} HTTP/1.1\r\nHost: {target.authority}\r\nContent-Length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1")
        async with asyncio.timeout(self.timeout_s):
            try:
                return await self._exchange((target.host, target.port), head + body, reuse=True)
            except _StaleConnection:
                # a kept-alive connection the server had closed before it read anything: once more, afresh
                return await self._exchange((target.host, target.port), head + body, reuse=False)

    async def _exchange(self, origin: tuple[str, int], request: bytes, reuse: bool) -> tuple[int, bytes]:
        pool = self.idle.setdefault(origin, [])
        connection = None
        while reuse and pool:
            candidate = pool.pop()
            if not candidate.closed and not candidate.buffer:
                connection = candidate
                break
            candidate.close()
        reused = connection is not None
        try:
            if connection is None:
                _, connection = await asyncio.get_running_loop().create_connection(_Connection, *origin)
            status, answer, keep = await connection.exchange(request)
        except OSError as error:
            if connection is not None:
                connection.close()
            raise UpstreamError(f"{error.__class__.__name__}: {error}") from None
        except UpstreamError:
            stale = reused and connection is not None and connection.closed and not connection.received
            if connection is not None:
                connection.close()
            if stale:
                raise _StaleConnection() from None
            raise
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        if keep and not connection.closed:
            pool.append(connection)
        else:
            connection.close()
        return status, answer

    def close(self) -> None:
        for pool in self.idle.values():
            for connection in pool:
                connection.close()
        self.idle.clear()
