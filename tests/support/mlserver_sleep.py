"""A real Seldon MLServer on loopback serving a model whose batch of n costs a + b*n ms.

Use it from a test as the `mlserver_sleep` fixture (import it into a conftest
or test module: `from support.mlserver_sleep import mlserver_sleep`)::

    def test_something(mlserver_sleep):
        server = mlserver_sleep(a_ms=20, b_ms=2, workers=2, max_batch_size=8, max_batch_time_s=0.005)
        server.infer_url  # http://127.0.0.1:<port>/v2/models/sleep/infer

or without pytest through `start_sleep_server(folder, SleepServerConfig(...))`
and `SleepServer.stop()`. The server runs `mlserver start` on free loopback
ports with adaptive batching (MLSERVER_MODEL_MAX_BATCH_SIZE,
MLSERVER_MODEL_MAX_BATCH_TIME) and MLSERVER_PARALLEL_WORKERS set in its
environment; the model is `sleep_runtime.SleepModel` (see that module for the
settings that make it fail at one batch size or load slowly). The server runs
in a process group of its own, and stopping it signals that group only: the
`mlserver` process this helper started and the workers it spawned.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

RUNTIME_MODULE = Path(__file__).with_name("sleep_runtime.py")
MODEL_NAME = "sleep"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SleepServerConfig:
    """What the server is started with; the model's cost is a_ms + b_ms x rows per batch."""

    a_ms: float = 20.0
    b_ms: float = 2.0
    workers: int = 1
    max_batch_size: int = 1
    max_batch_time_s: float = 0.0
    fail_at_batch: int | None = None
    fail_message: str = "failed at this batch size"
    load_delay_s: float = 0.0
    model_name: str = MODEL_NAME
    item_outputs: tuple[tuple[str, int], ...] = ()  # (output name, rows per request): a detector's lists

    def model_settings(self) -> dict:
        extra = {"a_ms": self.a_ms, "b_ms": self.b_ms, "fail_message": self.fail_message,
                 "load_delay_s": self.load_delay_s}
        if self.fail_at_batch is not None:
            extra["fail_at_batch"] = self.fail_at_batch
        if self.item_outputs:
            extra["item_outputs"] = dict(self.item_outputs)
        return {"name": self.model_name, "implementation": "sleep_runtime.SleepModel",
                "parameters": {"extra": extra}}

    def environment(self) -> dict[str, str]:
        """The variables under test: adaptive batching and the worker count."""
        return {
            "MLSERVER_MODEL_MAX_BATCH_SIZE": str(self.max_batch_size),
            "MLSERVER_MODEL_MAX_BATCH_TIME": str(self.max_batch_time_s),
            "MLSERVER_PARALLEL_WORKERS": str(self.workers),
        }


@dataclass
class SleepServer:
    """A started `mlserver start`; `stop()` ends its process group."""

    config: SleepServerConfig
    folder: Path
    http_port: int
    process: subprocess.Popen
    log_path: Path
    stopped: bool = field(default=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def infer_url(self) -> str:
        return f"{self.base_url}/v2/models/{self.config.model_name}/infer"

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:] if self.log_path.exists() else ""

    def is_ready(self) -> bool:
        for path in ("/v2/health/ready", f"/v2/models/{self.config.model_name}/ready"):
            try:
                with urllib.request.urlopen(self.base_url + path, timeout=2) as response:
                    if response.status != 200:
                        return False
            except (urllib.error.URLError, OSError):
                return False
        return True

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlserver exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.is_ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"mlserver not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the server's own process group, SIGKILL if it lingers; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        # workers of a server that exited first may outlive it in the group
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while group_members(self.process.pid) and time.monotonic() < deadline:
            _signal_group(self.process.pid, signal.SIGKILL)
            time.sleep(0.1)


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def group_members(group: int) -> list[int]:
    """Live (not zombie) processes in a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgid = fields[0], int(fields[2])
        if pgid == group and state != "Z":
            members.append(int(stat.parent.name))
    return members


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mlserver_executable() -> str:
    beside_python = Path(sys.executable).with_name("mlserver")
    found = str(beside_python) if beside_python.exists() else shutil.which("mlserver")
    if not found:
        raise RuntimeError("mlserver is not installed: pip install -e '.[dev]'")
    return found


def write_model_folder(folder: Path, config: SleepServerConfig, http_port: int) -> None:
    """settings.json (loopback ports), model-settings.json and the runtime module, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(RUNTIME_MODULE, folder / RUNTIME_MODULE.name)
    metrics_dir = folder / "metrics"
    metrics_dir.mkdir(exist_ok=True)
    settings = {"host": "127.0.0.1", "http_port": http_port, "grpc_port": free_port(),
                "metrics_port": free_port(), "metrics_dir": str(metrics_dir), "debug": False}
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    (folder / "model-settings.json").write_text(json.dumps(config.model_settings(), indent=2))


def start_sleep_server(folder: Path, config: SleepServerConfig, wait_ready: bool = True,
                       ready_timeout_s: float = READY_TIMEOUT_S) -> SleepServer:
    """Start `mlserver start folder` with `config`; by default wait until server and model are ready."""
    http_port = free_port()
    write_model_folder(folder, config, http_port)
    log_path = folder / "mlserver.log"
    environment = {**os.environ, **config.environment()}
    environment.pop("PYTHONSAFEPATH", None)  # mlserver imports the runtime from the model folder
    with log_path.open("wb") as log:
        process = subprocess.Popen([mlserver_executable(), "start", str(folder)], cwd=folder, env=environment,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    server = SleepServer(config=config, folder=folder, http_port=http_port, process=process, log_path=log_path)
    if wait_ready:
        try:
            server.wait_ready(ready_timeout_s)
        except BaseException:
            server.stop()
            raise
    return server


try:
    import pytest
except ImportError:  # the helper works without pytest too
    pytest = None

if pytest is not None:
    @pytest.fixture
    def mlserver_sleep(tmp_path):
        """Factory: `mlserver_sleep(**SleepServerConfig fields, wait_ready=True)` -> a started SleepServer.

        Every server it started is stopped when the test ends.
        """
        started: list[SleepServer] = []

        def start(wait_ready: bool = True, **fields) -> SleepServer:
            folder = tmp_path / f"mlserver-{len(started)}"
            server = start_sleep_server(folder, SleepServerConfig(**fields), wait_ready=wait_ready)
            started.append(server)
            return server

        yield start
        for server in started:
            server.stop()
