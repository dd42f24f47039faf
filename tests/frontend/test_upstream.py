"""The frontend's HTTP/1.1 client to the task servers, against raw servers that answer as real ones may."""

import asyncio

import pytest

from tessera.frontend.upstream import Upstream, UpstreamError

BODY = b'{"outputs": []}'


async def raw_server(answer):
    """A loopback server that reads one request head (and its small body) and writes `answer(n)`."""
    served = [0]

    async def handle(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            served[0] += 1
            reply, close = answer(served[0])
            writer.write(reply)
            await writer.drain()
            if close:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v2/models/m/infer", served


def sized(body=BODY, extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


def test_a_chunked_response_is_read_whole():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"out\r\nA\r\nputs\": []}\r\n0\r\n\r\n"

    async def main():
        server, url, _ = await raw_server(lambda n: (chunked, False))
        upstream = Upstream(5)
        assert await upstream.post(url, b"{}", {}) == (200, BODY)
        assert await upstream.post(url, b"{}", {}) == (200, BODY)  # the connection stayed usable
        server.close()

    asyncio.run(main())


def test_keep_alive_reuses_one_connection_and_connection_close_opens_a_new_one():
    async def main():
        connections = []
        server, url, served = await raw_server(lambda n: (sized(extra=b"Connection: close\r\n" if n == 2 else b""),
                                                          n == 2))
        upstream = Upstream(5)
        for _ in range(4):
            assert (await upstream.post(url, b"{}", {}))[0] == 200
            connections.append(len(upstream.idle[("127.0.0.1", server.sockets[0].getsockname()[1])]))
        server.close()
        return connections

    assert asyncio.run(main()) == [1, 0, 1, 1]


def test_a_kept_alive_connection_the_server_closed_is_retried_once_on_a_fresh_one():
    async def main():
        server, url, served = await raw_server(lambda n: (sized(), True))  # closes after every answer
        upstream = Upstream(5)
        for _ in range(3):
            assert await upstream.post(url, b"{}", {}) == (200, BODY)
        server.close()
        return served[0]

    assert asyncio.run(main()) == 3


def test_a_server_that_hangs_up_mid_answer_is_an_upstream_error_not_a_hang():
    async def main():
        server, url, _ = await raw_server(lambda n: (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{", True))
        with pytest.raises(UpstreamError, match="closed the connection"):
            await Upstream(5).post(url, b"{}", {})
        server.close()

    asyncio.run(main())


def test_a_server_that_never_answers_times_out():
    async def main():
        async def silent(reader, writer):
            await asyncio.sleep(10)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
        with pytest.raises(TimeoutError):
            await Upstream(0.2).post(url, b"{}", {})
        server.close()

    asyncio.run(main())


def test_nothing_listening_is_an_upstream_error():
    with pytest.raises(UpstreamError, match="ConnectionRefused"):
        asyncio.run(Upstream(5).post("http://127.0.0.1:9/x", b"{}", {}))
