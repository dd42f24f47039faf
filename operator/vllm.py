"""The operator's client of an AdapterPool server's vLLM API: which adapters it lists, and loading one.

The contract, pinned to vLLM 0.8.5 (docs/adapter-loading.md, read from that
release's `vllm/entrypoints/openai/api_server.py` and `serving_models.py`):

- `GET /v1/models`: `{"object": "list", "data": [card, ...]}`, the base
  model's card first (no `parent`), then one card per registered LoRA
  adapter, `id` its name, `parent` the base model's name, `root` its path.
- `POST /v1/load_lora_adapter` with `{"lora_name", "lora_path"}` (JSON, or
  415): 200 and a plain-text success line; 400 `InvalidUserInput` when the
  name is already registered; 404 `NotFoundError` when no adapter is found at
  the path; 400 `BadRequestError` for any other engine refusal (a rank above
  `--max-lora-rank`). Errors are `{"object": "error", "message", "type", "code"}`.
  Only served when the server runs with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`
  true (else 404 `{"detail": "Not Found"}`).
- `POST /v1/unload_lora_adapter` with `{"lora_name"}`: 200; 404 `NotFoundError`
  for a name not registered. It removes the registration only.

No Kubernetes here: `cluster.py` stays the only API client.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

MODELS_PATH = "/v1/models"
LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
ALREADY_LOADED = "has already been loaded"
"""vLLM's message when the name is registered already: the load this reconcile wanted has happened."""


class ServerError(Exception):
    """A server refused a request (`status` its HTTP status) or did not answer (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class VllmClient:
    timeout_s: float

    def loaded_adapters(self, url: str) -> frozenset[str]:
        """The names of the LoRA adapters the server at `url` has registered (the cards with a parent)."""
        listed = json.loads(self._call(urllib.request.Request(url + MODELS_PATH)))
        return frozenset(card["id"] for card in listed.get("data") or [] if card.get("parent"))

    def load_adapter(self, url: str, name: str, path: str) -> None:
        """Registers adapter `name` from `path`; one registered already counts as loaded."""
        body = json.dumps({"lora_name": name, "lora_path": path}).encode()
        request = urllib.request.Request(url + LOAD_PATH, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            self._call(request)
        except ServerError as error:
            if error.status != 400 or ALREADY_LOADED not in str(error):
                raise

    def unload_adapter(self, url: str, name: str) -> None:
        """Removes adapter `name`'s registration (a copy of another source, loaded again next); one not registered
        (vLLM's 404) is gone already."""
        body = json.dumps({"lora_name": name}).encode()
        request = urllib.request.Request(url + UNLOAD_PATH, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            self._call(request)
        except ServerError as error:
            if error.status != 404:
                raise

    def _call(self, request: urllib.request.Request) -> str:
        return call(request, self.timeout_s)[1]


def call(request: urllib.request.Request, timeout_s: float) -> tuple[int, str]:
    """(HTTP status, body) of a request answered with success; a ServerError for an error answer or none."""
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, str(response.read().decode())
    except urllib.error.HTTPError as error:
        raise ServerError(error_message(error.read().decode(errors="replace")), error.code) from None
    except (OSError, ValueError) as error:  # refused, reset, timed out, not HTTP
        raise ServerError(f"no answer from {request.full_url}: {error}") from None


def error_message(text: str) -> str:
    """The `message` of vLLM's error body (or FastAPI's `detail`), else the body itself, cut short."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(body, dict):
        return str(body.get("message") or body.get("detail") or text)[:300]
    return text[:300]
