"""A small Open Inference Protocol (KServe V2 REST) client over the standard library.

One `Connection` per thread keeps one HTTP/1.1 connection open, so that a
measurement times the server, not TCP set-up. Request bodies are built once
per batch size and reused.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from tessera.profiler.contract import BATCH_SIZE_OUTPUT, infer_path, metadata_path, ready_paths

BYTES_PER_VALUE = {"FP32": 4, "FP64": 8, "FP16": 2, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8, "UINT8": 1,
                   "UINT16": 2, "UINT32": 4, "UINT64": 8, "BOOL": 1}
JSON = {"Content-Type": "application/json"}
# The protocol's binary tensor extension (Triton, KServe): a JSON header of this length, then raw tensor bytes.
BINARY_HEADER = "Inference-Header-Content-Length"
DEFAULT_FEATURES = (1,)


class ServerError(Exception):
    """The server answered an inference with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class InputSpec:
    """The model's first input, from its metadata: name, datatype and the shape of one row."""

    name: str
    datatype: str
    row_shape: tuple[int, ...]

    @classmethod
    def from_metadata(cls, metadata: dict) -> "InputSpec":
        inputs = metadata.get("inputs") or []
        if not inputs:
            return cls(name="input", datatype="FP32", row_shape=DEFAULT_FEATURES)
        first = inputs[0]
        datatype = str(first.get("datatype", "FP32")).upper()
        if datatype not in BYTES_PER_VALUE:
            raise ValueError(f"input {first.get('name')!r}: datatype {datatype} is not a numeric tensor")
        # metadata shapes include the batch dimension (-1); a model without one has rows of its full shape
        shape = [int(d) for d in first.get("shape", [])]
        row = shape[1:] if shape and shape[0] == -1 else shape
        return cls(name=str(first.get("name", "input")), datatype=datatype,
                   row_shape=tuple(max(d, 1) for d in row) or DEFAULT_FEATURES)

    def values(self, batch: int) -> int:
        count = batch
        for d in self.row_shape:
            count *= d
        return count

    def request(self, batch: int, binary: bool = False) -> tuple[bytes, dict[str, str]]:
        """Body and headers of an inference request of `batch` rows of zeros, JSON or binary tensors."""
        tensor: dict[str, object] = {"name": self.name, "shape": [batch, *self.row_shape], "datatype": self.datatype}
        if not binary:
            zero = False if self.datatype == "BOOL" else 0
            tensor["data"] = [zero] * self.values(batch)
            return json.dumps({"inputs": [tensor]}, separators=(",", ":")).encode(), JSON
        size = self.values(batch) * BYTES_PER_VALUE[self.datatype]
        tensor["parameters"] = {"binary_data_size": size}
        header = json.dumps({"inputs": [tensor]}, separators=(",", ":")).encode()
        return header + bytes(size), {"Content-Type": "application/octet-stream", BINARY_HEADER: str(len(header))}


@dataclass(frozen=True)
class InferenceOutcome:
    latency_s: float
    rows: int  # first dimension of the first output
    batch_seen: int | None  # what the server's `batch_size` output says it ran at, if it has one


class Connection:
    """One persistent HTTP connection to the server."""

    def __init__(self, base_url: str, timeout_s: float):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        for attempt in (1, 2):  # a kept-alive connection the server closed is reopened once
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._connection.request(method, path, body=body, headers=headers or {})
                response = self._connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def is_ready(self, model: str) -> bool:
        try:
            return all(self.request("GET", path)[0] == 200 for path in ready_paths(model))
        except OSError:
            self.close()
            return False

    def metadata(self, model: str) -> dict:
        status, body = self.request("GET", metadata_path(model))
        if status != 200:
            raise ServerError(status, body.decode(errors="replace"))
        return json.loads(body)

    def infer(self, model: str, request: tuple[bytes, dict[str, str]]) -> InferenceOutcome:
        started = time.perf_counter()
        status, payload = self.request("POST", infer_path(model), *request)
        latency = time.perf_counter() - started
        if status != 200:
            raise ServerError(status, error_message(payload))
        outputs = json.loads(payload).get("outputs") or []
        rows = int(outputs[0]["shape"][0]) if outputs and outputs[0].get("shape") else 0
        seen = next((o for o in outputs if o.get("name") == BATCH_SIZE_OUTPUT), None)
        batch_seen = int(max(seen["data"])) if seen and seen.get("data") else None
        return InferenceOutcome(latency_s=latency, rows=rows, batch_seen=batch_seen)


def error_message(payload: bytes) -> str:
    """The protocol's `{"error": "..."}` body, or the raw text."""
    text = payload.decode(errors="replace")
    try:
        return str(json.loads(text).get("error", text))
    except (ValueError, AttributeError):
        return text
