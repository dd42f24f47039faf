"""The contract between tessera and a model server image (see docs/profiler.md).

A server speaks the Open Inference Protocol over REST (KServe V2): readiness
at `/v2/health/ready` and `/v2/models/{model}/ready`, metadata at
`/v2/models/{model}`, inference at `/v2/models/{model}/infer`. tessera tells it
how to batch and how many processes to run through the environment, the same
variables in serving and in profiling.
"""

from __future__ import annotations

ENV_BATCH_SIZE = "TESSERA_BATCH_SIZE"  # largest batch the server forms (rows)
ENV_BATCH_DELAY_MS = "TESSERA_MAX_BATCH_DELAY_MS"  # longest a server waits to fill a batch, ms
ENV_PROCESSES = "TESSERA_PROCESSES"  # server processes (the MPS degree) sharing the device
ENV_MODEL_NAME = "TESSERA_MODEL_NAME"  # the model name in the protocol's paths
ENV_HTTP_PORT = "TESSERA_PORT"  # the REST port

DEFAULT_HTTP_PORT = 8080

# An optional output: a server whose model reports, per row, the batch size it ran at
# lets the profiler check that the server did not merge or split its requests.
BATCH_SIZE_OUTPUT = "batch_size"


def server_environment(batch_size: int, batch_delay_ms: float, processes: int, model_name: str,
                       http_port: int = DEFAULT_HTTP_PORT) -> dict[str, str]:
    """The variables a server container gets, in serving and in profiling alike."""
    return {
        ENV_BATCH_SIZE: str(batch_size),
        ENV_BATCH_DELAY_MS: f"{batch_delay_ms:g}",
        ENV_PROCESSES: str(processes),
        ENV_MODEL_NAME: model_name,
        ENV_HTTP_PORT: str(http_port),
    }


def ready_paths(model: str) -> tuple[str, str]:
    return "/v2/health/ready", f"/v2/models/{model}/ready"


def metadata_path(model: str) -> str:
    return f"/v2/models/{model}"


def infer_path(model: str) -> str:
    return f"/v2/models/{model}/infer"
