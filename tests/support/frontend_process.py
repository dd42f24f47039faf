"""`tessera frontend` as a real process on loopback: started from a config, stopped by its own pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from support.mlserver_sleep import free_port

READY_TIMEOUT_S = 30.0


@dataclass
class FrontendProcess:
    process: subprocess.Popen
    port: int
    log_path: Path
    system: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def infer_url(self) -> str:
        return f"{self.base_url}/v2/models/{self.system}/infer"

    def alive(self) -> bool:
        if self.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(self.base_url + "/v2/health/live", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=5) as response:
            return response.read().decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def write_config(path: Path, config: dict) -> Path:
    """Write atomically (rename), as a ConfigMap update swaps the file."""
    staging = path.with_suffix(".staging")
    staging.write_text(yaml.safe_dump(config))
    staging.replace(path)
    return path


def start_frontend(config_path: Path, log_path: Path) -> FrontendProcess:
    port = free_port()
    system = yaml.safe_load(config_path.read_text())["system"]
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-P", "-m", "tessera", "frontend", str(config_path),
                                    "--host", "127.0.0.1", "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    frontend = FrontendProcess(process, port, log_path, system)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not frontend.alive():
        if process.poll() is not None or time.monotonic() > deadline:
            frontend.stop()
            raise RuntimeError(f"tessera frontend did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    return frontend
