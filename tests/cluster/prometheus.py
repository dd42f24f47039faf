"""A real Prometheus (Debian's package) scraping a small demand exporter.

The exporter serves `tessera_demo_requests_total{model=...}`, a counter that
grows at the request rate a test sets, so `rate(...)` in PromQL returns that
rate, as it would for a model server's request counter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .controlplane import die_with_parent_prefix, free_port

REQUESTS_METRIC = "tessera_demo_requests"  # exposed as tessera_demo_requests_total


class DemandExporter:
    """Serves a request counter per model whose rate tests set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rates: dict[str, float] = {}
        self._totals: dict[str, float] = {}
        self._since = time.monotonic()
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "DemandExporter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def set_rate(self, model: str, requests_per_second: float) -> None:
        with self._lock:
            self._advance()
            self._rates[model] = requests_per_second
            self._totals.setdefault(model, 0.0)

    def _advance(self) -> None:
        now = time.monotonic()
        for model, rate in self._rates.items():
            self._totals[model] += rate * (now - self._since)
        self._since = now

    def collect(self):  # prometheus_client collector protocol
        with self._lock:
            self._advance()
            total = CounterMetricFamily(REQUESTS_METRIC, "Requests served, per model (demand source for tests).",
                                        labels=["model"])
            rate = GaugeMetricFamily("tessera_demo_request_rate", "Request rate the test set, per model.",
                                     labels=["model"])
            for model in sorted(self._rates):
                total.add_metric([model], self._totals[model])
                rate.add_metric([model], self._rates[model])
        yield total
        yield rate

    def _handler(self):
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet
                pass

        return Handler


class Prometheus:
    """Debian's prometheus on 127.0.0.1 with its own storage, scraping every 1s."""

    def __init__(self, workdir: Path, targets: dict[str, str], binary: str | None = None):
        self.workdir = workdir
        self.targets = targets  # job name -> host:port
        self.binary = binary or shutil.which("prometheus") or "/usr/bin/prometheus"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Prometheus":
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in self.targets.items()
            ],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))
        logfile = open(self.workdir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [*die_with_parent_prefix(), self.binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        logfile.close()
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def query(self, promql: str) -> list[dict]:
        """Instant query over the HTTP API; returns the result vector."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def wait_for(self, promql: str, timeout: float = 60) -> list[dict]:
        """Waits until `promql` returns data (Prometheus up, target scraped)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}; see {self.workdir / 'prometheus.log'}")
            try:
                result = self.query(promql)
                if result:
                    return result
                last = result
            except Exception as e:  # not listening yet
                last = e
            time.sleep(0.5)
        raise TimeoutError(f"no data for {promql!r} after {timeout}s (last: {last})")
