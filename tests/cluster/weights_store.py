"""The weights the end-to-end tests' AdapterPools name, in a real S3 server, and a real fetcher per test.

KWOK's pods run no containers, so no fetcher sidecar runs in them. Each test
runs tessera's own fetcher (`tessera weights serve`, the sidecar's code) as a
process on 127.0.0.1, reached through the operator's address-override hook
(`--adapter-fetcher-url`), and fetching from moto's S3 server (a real S3 HTTP
API) into one folder; the vLLM stand-in reads that folder as `/adapters` and
refuses a load whose files are not there, as vLLM does. What the fake pods
cannot show: one fetcher serves every pod (one folder, not one per pod).

Every adapter's files are made from its name (`adapter_files`), so the
examples' `weights.digest` values are real: the digests of these files
(`tessera weights digest`), uploaded under the examples' URIs.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tessera.weights.digest import directory_digest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools"
S3_ENV = {"AWS_ACCESS_KEY_ID": "tessera-test", "AWS_SECRET_ACCESS_KEY": "tessera-test-secret",
          "AWS_REGION": "us-east-1"}


def adapter_files(name: str) -> dict[str, bytes]:
    """A LoRA adapter's folder, made from its name: the config vLLM reads first, and a weights file."""
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
              "base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "tessera_test_adapter": name}
    return {"adapter_config.json": json.dumps(config, sort_keys=True).encode(),
            "adapter_model.safetensors": hashlib.sha256(name.encode()).digest() * 64}


def files_digest(files: dict[str, bytes]) -> str:
    with tempfile.TemporaryDirectory() as folder:
        for rel, data in files.items():
            (Path(folder) / rel).write_bytes(data)
        return directory_digest(Path(folder))


def adapter_weights(name: str, uri: str) -> dict[str, str]:
    """The `weights` of an adapter whose files are adapter_files(name) at `uri`."""
    return {"uri": uri, "digest": files_digest(adapter_files(name))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


class S3Store:
    """moto's S3 server (a process of its own) holding the examples' adapters."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def start(self) -> "S3Store":
        port = free_port()
        self.process = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p",
                                         str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(port, self.process, "moto_server")
        self.env = {**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        for example in sorted(EXAMPLES.glob("*.yaml")):
            self.upload(yaml.safe_load(example.read_text()))
        return self

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"], region_name=self.env["AWS_REGION"],
                            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"])

    def put(self, uri: str, files: dict[str, bytes]) -> None:
        """Puts `files` as the folder at an s3:// `uri`."""
        parts = urlsplit(uri)
        s3, prefix = self.client(), parts.path.strip("/")
        try:
            s3.create_bucket(Bucket=parts.netloc)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        for rel, data in files.items():
            s3.put_object(Bucket=parts.netloc, Key=f"{prefix}/{rel}", Body=data)

    def upload(self, document: dict) -> None:
        """Each adapter of an AdapterPool document, adapter_files(name) at its s3:// uri."""
        for adapter in document["spec"]["adapters"]:
            self.put(adapter["weights"]["uri"], adapter_files(adapter["name"]))

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


class WeightsStore:
    """tessera's fetcher (`tessera weights serve`) in a process of its own, fetching from `s3` into `folder`."""

    def __init__(self, s3: S3Store, folder: Path) -> None:
        self.s3 = s3
        self.folder = folder
        self.process: subprocess.Popen | None = None
        self.fetcher_url = ""

    def start(self) -> "WeightsStore":
        port = free_port()
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "tessera"), "weights", "serve", "--dir", str(self.folder), "--sources",
             str(self.folder.parent / "sources"), "--host", "127.0.0.1", "--port", str(port)],
            env={**os.environ, **self.s3.env, "PYTHONSAFEPATH": "1"}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        wait_listening(port, self.process, "tessera weights serve")
        self.fetcher_url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
