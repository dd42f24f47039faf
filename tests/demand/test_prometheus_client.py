"""The Prometheus client's readings: one number or Unknown with why (operator/prometheus.py).

Answers come from a local HTTP server that records the requests it gets, to
check the bearer token travels only in the Authorization header.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tessera.operator.prometheus import PrometheusClient, Reason, one_number

TOKEN = "s3cr3t-token-for-tests"


def vector(*values):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": f"p{i}"}, "value": [1.0, v]} for i, v in enumerate(values)]}}


@pytest.mark.parametrize("body, reason", [
    (vector(), Reason.NO_DATA),
    (vector("NaN"), Reason.NOT_A_NUMBER),
    (vector("+Inf"), Reason.NOT_A_NUMBER),
    (vector("1", "2"), Reason.SEVERAL_SERIES),
    (vector("-3"), Reason.NEGATIVE),
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, Reason.QUERY_FAILED),
])
def test_no_number_is_unknown_with_its_reason(body, reason):
    reading = one_number(body)
    assert reading.value is None and reading.reason == reason


def test_a_present_zero_is_a_reading_of_zero():
    assert one_number(vector("0")).value == 0.0


def test_a_scalar_is_a_reading():
    assert one_number({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "4.5"]}}).value == 4.5


@pytest.fixture
def server():
    seen: list[dict] = []
    delay = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers["Content-Length"])
            seen.append({"headers": dict(self.headers), "body": self.rfile.read(length).decode(), "path": self.path})
            if delay.is_set():
                threading.Event().wait(2)
            body = json.dumps(vector("12.5")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", seen, delay
    httpd.shutdown()
    httpd.server_close()


def test_the_token_is_read_from_its_file_and_sent_only_as_a_bearer_header(server, tmp_path):
    url, seen, _ = server
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    reading = PrometheusClient(url, token_file=str(token_file)).instant("sum(x)")
    assert reading.value == 12.5
    assert seen[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in seen[0]["body"] and TOKEN not in seen[0]["path"]


def test_a_rotated_token_is_used_at_the_next_query(server, tmp_path):
    url, seen, _ = server
    token_file = tmp_path / "token"
    client = PrometheusClient(url, token_file=str(token_file))
    token_file.write_text("first")
    client.instant("sum(x)")
    token_file.write_text("second")
    client.instant("sum(x)")
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer first", "Bearer second"]


def test_a_slow_answer_is_a_timeout(server):
    url, _, delay = server
    delay.set()
    reading = PrometheusClient(url, timeout_s=0.3).instant("sum(x)")
    assert reading.value is None and reading.reason == Reason.TIMEOUT


def test_nothing_listening_is_unreachable():
    reading = PrometheusClient("http://127.0.0.1:9", timeout_s=1).instant("sum(x)")
    assert reading.value is None and reading.reason == Reason.UNREACHABLE
