"""A local HTTP server in Prometheus' place: it answers an instant-query vector a test sets and records
every request (headers, body, path), to check what the client sends and how answers are read."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def vector(*values):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": f"p{i}"}, "value": [1.0, v]} for i, v in enumerate(values)]}}


@dataclass
class PrometheusStub:
    url: str = ""
    values: tuple = ("12.5",)
    by_query: dict[str, tuple] = field(default_factory=dict)
    """Answers for queries whose (URL-encoded) body holds the key; `values` for the others."""
    delay_s: float = 0.0
    requests: list[dict] = field(default_factory=list)


@pytest.fixture
def prometheus_stub():
    stub = PrometheusStub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers["Content-Length"])
            stub.requests.append({"headers": dict(self.headers), "body": self.rfile.read(length).decode(),
                                  "path": self.path})
            threading.Event().wait(stub.delay_s)
            request = stub.requests[-1]["body"]
            values = next((v for key, v in stub.by_query.items() if key in request), stub.values)
            body = json.dumps(vector(*values)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    stub.url = f"http://127.0.0.1:{httpd.server_port}"
    yield stub
    httpd.shutdown()
    httpd.server_close()
