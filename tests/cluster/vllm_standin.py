"""A stand-in for the vLLM servers of AdapterPool pods: vLLM 0.8.5's model list and runtime LoRA endpoints.

KWOK runs no containers, so no vLLM answers at a fake pod's IP. This one
HTTP server, on 127.0.0.1, plays one vLLM process per pod: pod P of
namespace N is served under `/N/P`, which the operator reaches through its
one address-override hook, `--adapter-server-url http://127.0.0.1:<port>/{namespace}/{pod}`
(docs/adapter-loading.md). What each process does follows vLLM 0.8.5's
`api_server.py` and `serving_models.py` (the contract in docs/adapter-loading.md):

- `GET /v1/models`: the base model's card, then one card per registered
  adapter (`parent` the base model, `root` its path).
- `POST /v1/load_lora_adapter` (JSON only: else 415): 200 and a text line;
  400 `InvalidUserInput` for an empty name or path, or a name registered
  already; 404 `NotFoundError` when no adapter is at the path: with
  `adapter_root`, a path `/adapters/<name>` is that folder's `<name>`, and
  no adapter is there unless it holds `adapter_config.json` (vLLM 0.8.5's
  `PEFTHelper.from_local_dir` reads it first), so a load before tessera's
  fetcher put the files there is refused; the test may also name paths
  `missing`. `POST /v1/unload_lora_adapter`: 404 for
  a name not registered. Both are 404 `{"detail": "Not Found"}` without the
  runtime-update switch (`runtime_updating=False`).
- The CPU cache: the last `max_cpu_loras` adapters loaded are in it; one
  evicted stays registered and listed (vLLM loads it again from its path
  on the next request that names it).
- A restart (`restart`) is a new process: no adapter registered. A pod
  `held` is one whose server is not up yet: its requests get no answer
  (the connection closes), as a vLLM still loading its weights refuses
  connections.

What it cannot show: GPU memory, a real load's time, throughput.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BASE_MODEL = "Qwen/Qwen2.5-7B-Instruct"
NOT_FOUND = {"detail": "Not Found"}

PodKey = tuple[str, str]


@dataclass
class Process:
    """One vLLM server process: its registered adapters (in load order) and its CPU cache."""

    max_cpu_loras: int
    registered: dict[str, str] = field(default_factory=dict)
    """name -> path."""
    cache: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def cards(self) -> list[dict]:
        base = {"id": BASE_MODEL, "object": "model", "owned_by": "vllm", "root": BASE_MODEL, "parent": None,
                "max_model_len": 32768, "permission": []}
        return [base, *({"id": name, "object": "model", "owned_by": "vllm", "root": path, "parent": BASE_MODEL,
                         "max_model_len": None, "permission": []} for name, path in self.registered.items())]

    def load(self, name: str, path: str) -> None:
        self.registered[name] = path
        self.cache[name] = None
        self.cache.move_to_end(name)
        while len(self.cache) > self.max_cpu_loras:
            self.cache.popitem(last=False)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the operator asks 16 servers at once; the default backlog of 5 refuses some


class VllmStandin:
    def __init__(self, max_cpu_loras: int = 8, runtime_updating: bool = True, load_s: float = 0.0,
                 adapter_root: Path | None = None) -> None:
        self.max_cpu_loras = max_cpu_loras
        self.adapter_root = adapter_root
        """The folder the pods' `/adapters` is (the fetcher's); None: every path but `missing` holds an adapter."""
        self.fetcher_url: str | None = None
        """Where the fetcher filling `adapter_root` answers (weights_store.py), for the operator's hook."""
        self.load_s = load_s
        """Seconds each load takes before it is answered (a fixed stand-in for reading the adapter's files)."""
        self.runtime_updating = runtime_updating
        self.missing: set[str] = set()
        """Adapter paths where no adapter is found (the load is refused with vLLM's 404)."""
        self.processes: dict[PodKey, Process] = {}
        self.held: set[PodKey] = set()
        self.hold_new = False
        """Pods first seen while this is set are held until released."""
        self.requests: list[tuple[str, str, str, str]] = []
        """(method, namespace, pod, path) of every request answered."""
        self.lock = threading.Lock()
        self.server: Server | None = None

    # -- what a test does -----------------------------------------------------------
    def start(self) -> "VllmStandin":
        self.server = Server(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, name="vllm-standin", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def url_template(self) -> str:
        """The operator's --adapter-server-url for this stand-in."""
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/{{namespace}}/{{pod}}"

    def listed(self, namespace: str, pod: str) -> list[str]:
        with self.lock:
            process = self.processes.get((namespace, pod))
            return list(process.registered) if process else []

    def paths(self, namespace: str, pod: str) -> dict[str, str]:
        with self.lock:
            process = self.processes.get((namespace, pod))
            return dict(process.registered) if process else {}

    def restart(self, namespace: str, pod: str) -> None:
        """The pod's server process restarts: a new process, nothing registered."""
        with self.lock:
            self.processes[(namespace, pod)] = Process(self.max_cpu_loras)

    def release(self) -> None:
        """Every held server is up now, and pods seen from now on answer at once."""
        with self.lock:
            self.held.clear()
            self.hold_new = False

    def loads(self, namespace: str, pod: str) -> int:
        with self.lock:
            return sum(1 for method, ns, name, path in self.requests
                       if (ns, name, path) == (namespace, pod, "/v1/load_lora_adapter"))

    # -- the HTTP side ----------------------------------------------------------------
    def _answer(self, method: str, namespace: str, pod: str, path: str, body: bytes,
                content_type: str) -> tuple[int, str, bytes] | None:
        """(status, content type, body), or None: no answer (a held pod)."""
        with self.lock:
            key = (namespace, pod)
            if key not in self.processes:
                if self.hold_new:
                    self.held.add(key)
                self.processes[key] = Process(self.max_cpu_loras)
            if key in self.held:
                return None
            self.requests.append((method, namespace, pod, path))
            process = self.processes[key]
            if method == "GET" and path == "/v1/models":
                return _json(200, {"object": "list", "data": process.cards()})
            if method == "GET" and path == "/health":
                return 200, "text/plain", b""
            if method == "POST" and path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
                if not self.runtime_updating:
                    return _json(404, NOT_FOUND)
                if content_type.split(";")[0].strip() != "application/json":
                    return _json(415, {"detail": "Unsupported Media Type: Only 'application/json' is allowed"})
                try:
                    request = json.loads(body)
                except ValueError:
                    return _json(400, {"detail": "invalid JSON"})
                if path == "/v1/load_lora_adapter":
                    return self._load(process, request)
                return self._unload(process, request)
            return _json(404, NOT_FOUND)

    def _load(self, process: Process, request: dict) -> tuple[int, str, bytes]:
        name, path = request.get("lora_name"), request.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return _json(422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required"}]})
        if not name or not path:
            return _error(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput")
        if name in process.registered:
            return _error(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
        if path in self.missing or not self._found(path):
            return _error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
        process.load(name, path)
        return 200, "text/plain", f"Success: LoRA adapter '{name}' added successfully.".encode()

    def _found(self, path: str) -> bool:
        if self.adapter_root is None:
            return True
        rel = Path(path).relative_to("/adapters") if path.startswith("/adapters/") else None
        return rel is not None and ".." not in rel.parts and (self.adapter_root / rel / "adapter_config.json").is_file()

    @staticmethod
    def _unload(process: Process, request: dict) -> tuple[int, str, bytes]:
        name = request.get("lora_name")
        if name not in process.registered:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        del process.registered[name]
        process.cache.pop(name, None)
        return 200, "text/plain", f"Success: LoRA adapter '{name}' removed successfully.".encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                parts = self.path.split("?")[0].split("/", 3)  # "", namespace, pod, rest
                if len(parts) < 4:
                    self._send(*_json(404, NOT_FOUND))
                    return
                if parts[3] == "v1/load_lora_adapter":
                    time.sleep(standin.load_s)  # outside the lock: other servers' loads go on meanwhile
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                answer = standin._answer(method, parts[1], parts[2], "/" + parts[3], body,
                                         self.headers.get("Content-Type") or "")
                if answer is None:
                    self.close_connection = True  # not up yet: no answer at all
                    return
                self._send(*answer)

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, *args) -> None:
                pass

        return Handler


def _json(status: int, body: object) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()


def _error(status: int, message: str, kind: str) -> tuple[int, str, bytes]:
    return _json(status, {"object": "error", "message": message, "type": kind, "param": None, "code": status})
