"""The fetcher sidecar of an AdapterPool server pod: fetches an adapter when the operator asks, before its load.

`tessera weights serve` runs it beside vLLM, sharing the `/adapters` emptyDir
(the operator's side: operator/fetcher.py; the protocol: docs/weights.md).

- `POST /v1/fetch` with JSON `{"name", "uri", "digest"}` and optionally
  `"waitSeconds"`: 200 `{"state": "ready", "path"}` once `<dir>/<name>` holds
  that source's files, checked against its digest; 202 `{"state": "fetching"}`
  while a fetch runs (each request waits for it first, `waitSeconds` or at
  most WAIT_S, so a small adapter is one request; 0 only starts it); 422 `{"state": "failed", "message"}` once, for a fetch that failed
  (a digest mismatch, a missing object, an unsupported scheme; `message` says which): the next
  request tries again, so the operator's back-off paces the retries; 400 for
  a request that is not such a body.
- `GET /healthz`: 200.

Idempotent: a folder fetched and checked is recorded (`<dir>/.verified/<name>`,
the digest and uri), so asking again answers `ready` without fetching; a new
source for the name (a spec edit) is fetched beside the old copy and renamed
over it only once checked.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tessera.weights.digest import WeightsError
from tessera.weights.fetch import fetch

log = logging.getLogger(__name__)

FETCH_PATH = "/v1/fetch"
WAIT_S = 10.0
FETCHES_AT_ONCE = 4
ADAPTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
RECORDS = ".verified"

Source = tuple[str, str]
"""(uri, digest)."""


@dataclass
class Fetcher:
    root: Path
    sources: Path
    wait_s: float = WAIT_S
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: dict[str, tuple[Source, threading.Event]] = field(default_factory=dict)
    failed: dict[str, tuple[Source, str]] = field(default_factory=dict)
    slots: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(FETCHES_AT_ONCE))

    def record_path(self, name: str) -> Path:
        return self.root / RECORDS / name

    def recorded(self, name: str) -> Source | None:
        try:
            digest, uri = self.record_path(name).read_text().split(" ", 1)
        except (OSError, ValueError):
            return None
        return uri, digest

    def ask(self, name: str, source: Source, wait_s: float | None = None) -> tuple[int, dict]:
        """The answer to a fetch request: ready, failed (once), or fetching (started here if not running), after
        waiting up to `wait_s` (at most the fetcher's own wait) for a running fetch."""
        answer, done = self.state(name, source, start=True)
        if answer is None and done is not None:
            done.wait(self.wait_s if wait_s is None else min(wait_s, self.wait_s))
            answer, _ = self.state(name, source, start=False)
        return answer or (202, {"state": "fetching"})

    def state(self, name: str, source: Source, start: bool) -> tuple[tuple[int, dict] | None, threading.Event | None]:
        with self.lock:
            if self.recorded(name) == source and (self.root / name).is_dir():
                return (200, {"state": "ready", "path": str(self.root / name)}), None
            failure = self.failed.get(name)
            if failure is not None and failure[0] == source:
                del self.failed[name]
                return (422, {"state": "failed", "message": failure[1]}), None
            if name in self.running:
                return None, self.running[name][1]
            if not start:
                return None, None
            done = threading.Event()
            self.running[name] = (source, done)
        threading.Thread(target=self.run, args=(name, source, done), name=f"fetch-{name}", daemon=True).start()
        return None, done

    def run(self, name: str, source: Source, done: threading.Event) -> None:
        uri, digest = source
        try:
            with self.slots:
                self.record_path(name).unlink(missing_ok=True)
                fetch(uri, digest, self.root / name, self.sources)
                self.record_path(name).parent.mkdir(exist_ok=True)
                self.record_path(name).write_text(f"{digest} {uri}")
            log.info("adapter %s: fetched %s (%s)", name, uri, digest)
        except (WeightsError, OSError) as error:
            log.warning("adapter %s: %s", name, error)
            with self.lock:
                self.failed[name] = (source, str(error))
        finally:
            with self.lock:
                del self.running[name]
            done.set()


def request_of(body: bytes) -> tuple[str, Source, float | None] | str:
    """(name, source, wait) of a fetch request, or why it is refused."""
    try:
        request = json.loads(body)
        name, uri, digest = request["name"], request["uri"], request["digest"]
        wait = request.get("waitSeconds")
    except (ValueError, TypeError, KeyError, AttributeError):
        return 'the body must be JSON {"name", "uri", "digest"[, "waitSeconds"]}'
    if not all(isinstance(v, str) for v in (name, uri, digest)) or not ADAPTER_NAME.match(name):
        return "name must be a DNS-1035 label, uri and digest strings"
    if wait is not None and (not isinstance(wait, (int, float)) or not 0 <= wait <= WAIT_S):
        return f"waitSeconds must be a number in [0, {WAIT_S:g}]"
    return name, (uri, digest), wait


def handler(fetcher: Fetcher) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send(*(200, {"state": "ok"}) if self.path == "/healthz" else (404, {"message": "not found"}))

        def do_POST(self) -> None:
            if self.path != FETCH_PATH:
                self.send(404, {"message": "not found"})
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = request_of(body)
            if isinstance(request, str):
                self.send(400, {"message": request})
                return
            self.send(*fetcher.ask(*request))

        def send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def clear_leftovers(root: Path) -> None:
    """Removes the staging folders of fetches a restart of the sidecar cut short (names beginning with a dot, which
    no adapter name does), keeping the records of checked copies."""
    for path in root.glob(".*"):
        if path.name != RECORDS:
            shutil.rmtree(path, ignore_errors=True)


def server(fetcher: Fetcher, host: str, port: int) -> ThreadingHTTPServer:
    fetcher.root.mkdir(parents=True, exist_ok=True)
    clear_leftovers(fetcher.root)
    httpd = ThreadingHTTPServer((host, port), handler(fetcher))
    httpd.daemon_threads = True
    return httpd
