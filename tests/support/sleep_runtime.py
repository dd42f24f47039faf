"""An MLServer custom runtime whose cost is known exactly: a batch of n sleeps a + b*n ms.

Copied beside the model settings by `mlserver_sleep.py` and loaded by MLServer
as `sleep_runtime.SleepModel`. It sleeps with `time.sleep`, not `asyncio.sleep`,
so that one worker process serves one batch at a time, as a model on a device
does; parallel workers then multiply the throughput.

Settings (model-settings.json, `parameters.extra`):
- `a_ms`, `b_ms`: the fixed and per-row cost of a batch.
- `fail_at_batch`, `fail_message`: a batch of exactly this size fails with
  this message (an error at one batch size, such as out of memory).
- `load_delay_s`: the model takes this long to load (a server that does not
  become ready in time).
- `item_outputs`: {name: k}: answer, instead of `batch_size`, an output per
  name with k rows [0..k-1] for each request, as a detector lists what it
  found (serve it without adaptive batching: the rows are not the input's).

Every response carries, beside the input's rows echoed as `output`, an output
`batch_size` whose every row is the n the model ran at, so that a client can
check whether the server merged its requests into larger batches.
"""

from __future__ import annotations

import asyncio
import time

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class SleepModel(MLModel):
    async def load(self) -> bool:
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        self.a_ms = float(extra.get("a_ms", 0.0))
        self.b_ms = float(extra.get("b_ms", 0.0))
        self.fail_at_batch = extra.get("fail_at_batch")
        self.fail_message = str(extra.get("fail_message", "failed at this batch size"))
        self.item_outputs = {str(k): int(v) for k, v in (extra.get("item_outputs") or {}).items()}
        await asyncio.sleep(float(extra.get("load_delay_s", 0.0)))
        self.ready = True
        return self.ready

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = int(payload.inputs[0].shape[0])
        if self.fail_at_batch is not None and rows == int(self.fail_at_batch):
            raise RuntimeError(self.fail_message)
        time.sleep((self.a_ms + self.b_ms * rows) / 1000.0)
        if self.item_outputs:
            return InferenceResponse(model_name=self.name, outputs=[
                ResponseOutput(name=name, shape=[k, 1], datatype="INT64", data=list(range(k)))
                for name, k in self.item_outputs.items()])
        return InferenceResponse(
            model_name=self.name,
            outputs=[ResponseOutput(name="batch_size", shape=[rows, 1], datatype="INT64", data=[rows] * rows)],
        )
