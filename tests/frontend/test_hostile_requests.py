"""The hostile-request corpus through a real `tessera frontend` process: each a clear 4xx, nothing else breaks.

The process is alive and answers a valid request after the corpus (its one
task is unreachable on purpose, so that answer is a 502 naming the task),
and its memory stays bounded over repeated rounds.
"""

import http.client
import json

import pytest

from support.frontend_process import start_frontend, write_config
from frontend.corpus import CASES, MAX_BODY_BYTES, Case, request, tensor

ROUNDS = 3
RSS_GROWTH_MIB = 40
RSS_MIB = 400


@pytest.fixture(scope="module")
def frontend(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    config = write_config(folder / "frontend.yaml", {
        "system": "hostile", "sloMilliseconds": 1000, "settings": {"maxBodyBytes": MAX_BODY_BYTES},
        "tasks": [{"name": "only", "configurations": [
            {"name": "gone", "url": "http://127.0.0.1:9/v2/models/x/infer", "weight": 1,
             "singleMilliseconds": 1}]}]})
    process = start_frontend(config, folder / "frontend.log")
    yield process
    process.stop()


def send(port: int, case: Case) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        path = f"/v2/models/{case.model}/infer"
        if case.chunked:
            connection.putrequest(case.method, path)
            connection.putheader("Transfer-Encoding", "chunked")
            connection.endheaders()
            for start in range(0, len(case.body), 8192):
                piece = case.body[start:start + 8192]
                connection.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            connection.send(b"0\r\n\r\n")
        else:
            connection.request(case.method, path, body=case.body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_request_gets_its_clear_4xx(frontend, case):
    status, body = send(frontend.port, case)
    assert status == case.status, body[:500]
    if case.mentions:
        assert case.mentions in json.loads(body)["error"]


def test_after_the_corpus_the_process_is_alive_serves_and_its_memory_is_bounded(frontend):
    for case in CASES:  # one round first: the interpreter's own warm-up is not growth
        send(frontend.port, case)
    before = frontend.rss_mib()
    for _ in range(ROUNDS):
        for case in CASES:
            send(frontend.port, case)
    assert frontend.alive()
    assert frontend.rss_mib() - before < RSS_GROWTH_MIB
    assert frontend.rss_mib() < RSS_MIB
    status, body = send(frontend.port, Case("valid", request(tensor()), 502, ""))
    assert status == 502 and "task 'only' failed" in json.loads(body)["error"]
    assert 'outcome="invalid"' in frontend.metrics()
