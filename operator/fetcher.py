"""The operator's client of an AdapterPool server pod's fetcher sidecar: get an adapter's files there first.

Before each vLLM load the operator asks the pod's sidecar (`tessera weights
serve`, tessera/weights/sidecar.py; docs/weights.md) to fetch the adapter
from its `weights.uri` into the shared `/adapters/<name>` and check its
`weights.digest`:

- 200 `{"state": "ready"}`: the files are there and checked; the load goes on.
- 202 `{"state": "fetching"}`: not yet; the load waits for a later reconcile
  (a ServerError without a status: like a server that does not answer, it says
  nothing about the adapter and is not counted as a failed load).
- 422 `{"state": "failed", "error"}`: the fetch failed (a digest mismatch, a
  missing object, no access): a ServerError with the status, recorded like a
  refused load, so the adapter is marked failed after --adapter-load-failures.

No Kubernetes here: `cluster.py` stays the only API client.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

from tessera.operator.vllm import ServerError, call

FETCH_PATH = "/v1/fetch"
WAIT_S = 10.0
"""How long the sidecar may wait for a fetch before answering 'fetching' (its own cap)."""


class StillFetching(ServerError):
    """The sidecar is still fetching the adapter's files: no answer about the adapter yet."""


@dataclass(frozen=True)
class FetcherClient:
    timeout_s: float

    def fetch(self, url: str, name: str, uri: str, digest: str, wait_s: float) -> None:
        """Returns once the sidecar at `url` holds adapter `name` from `uri`, checked against `digest`, having let it
        wait up to `wait_s` for a running fetch; else raises (StillFetching: not yet)."""
        body = json.dumps({"name": name, "uri": uri, "digest": digest, "waitSeconds": wait_s}).encode()
        request = urllib.request.Request(url + FETCH_PATH, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            status, _ = call(request, self.timeout_s)
        except ServerError as error:
            raise ServerError(f"fetching its files: {error}", error.status) from None
        if status != 200:
            raise StillFetching(f"its files are being fetched from {uri}")
