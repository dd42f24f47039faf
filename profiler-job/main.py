"""The profiler container's entry point: `python -P -m tessera.profiler.main run|serve`.

`run` is the profiler (the Job's only regular container); `serve` wraps the
model server in its native-sidecar container. Every option also reads the
environment variable named beside it, which is how the Job sets them.
Exit codes: tessera.profiler.results.ExitCode (docs/profiler.md).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TypeVar

import click
from pydantic import BaseModel, ValidationError

from tessera.profiler.job import profile
from tessera.profiler.results import SweepResult, Target
from tessera.profiler.server_wrapper import run_server
from tessera.profiler.sweep import SweepSettings

ModelT = TypeVar("ModelT", bound=BaseModel)
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


@click.group()
def main() -> None:
    """tessera's profiler: measures one model variant on one GPU segment type."""


def _parse(model: type[ModelT], text: str, what: str) -> ModelT:
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        raise click.BadParameter(f"{what}: {error}") from None


@main.command("run")
@click.option("--target", "target_json", envvar="TESSERA_PROFILE_TARGET", required=True,
              help="Target JSON: variant, gpu, mig_profile, mps, batches. [TESSERA_PROFILE_TARGET]")
@click.option("--resume", "resume_json", envvar="TESSERA_PROFILE_RESUME", default="",
              help="A previous run's termination message, to resume from. [TESSERA_PROFILE_RESUME]")
@click.option("--server", "server_url", envvar="TESSERA_SERVER_URL", default="http://127.0.0.1:8080",
              show_default=True, help="The model server's REST base URL. [TESSERA_SERVER_URL]")
@click.option("--model", envvar="TESSERA_MODEL_NAME", required=True, help="Model name. [TESSERA_MODEL_NAME]")
@click.option("--shared-folder", type=click.Path(file_okay=False, path_type=Path), envvar="TESSERA_SHARED_DIR",
              default=None, help="Where the server's container writes the device identity; without it the "
                                 "device is not checked (a CPU server, in tests). [TESSERA_SHARED_DIR]")
@click.option("--termination-log", type=click.Path(dir_okay=False, path_type=Path),
              envvar="TESSERA_TERMINATION_LOG", default=DEFAULT_TERMINATION_LOG, show_default=True)
@click.option("--ready-timeout", type=click.FloatRange(min=0), envvar="TESSERA_READY_TIMEOUT_S",
              default=SweepSettings.ready_timeout_s, show_default=True, help="Seconds to wait for readiness.")
@click.option("--min-seconds", type=click.FloatRange(min=0), envvar="TESSERA_MIN_SECONDS",
              default=SweepSettings.min_seconds, show_default=True, help="Per phase and batch size.")
@click.option("--min-requests", type=click.IntRange(min=1), envvar="TESSERA_MIN_REQUESTS",
              default=SweepSettings.min_requests, show_default=True, help="Per phase and batch size.")
@click.option("--binary-tensors/--json-tensors", envvar="TESSERA_BINARY_TENSORS", default=False, show_default=True,
              help="Send inputs with the protocol's binary tensor extension. [TESSERA_BINARY_TENSORS]")
def run(target_json: str, resume_json: str, server_url: str, model: str, shared_folder: Path | None,
        termination_log: Path, ready_timeout: float, min_seconds: float, min_requests: int,
        binary_tensors: bool) -> None:
    """Measure the target's batch sizes against the server; the result goes to the termination log."""
    target = _parse(Target, target_json, "--target")
    previous = _parse(SweepResult, resume_json, "--resume") if resume_json else None
    settings = SweepSettings(ready_timeout_s=ready_timeout, min_seconds=min_seconds, min_requests=min_requests,
                             binary_tensors=binary_tensors)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def write(result: SweepResult) -> None:
        termination_log.write_text(result.termination_message())

    try:
        result = profile(target, server_url, model, settings, write, previous, shared_folder, stop)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    click.echo(result.termination_message())
    if result.failure:
        click.echo(f"profiler: {result.failure.kind.value}"
                   + (f" at batch {result.failure.batch}" if result.failure.batch else "")
                   + f": {result.failure.message}", err=True)
    sys.exit(int(result.exit_code))


@main.command("serve", context_settings={"ignore_unknown_options": True})
@click.option("--shared-folder", type=click.Path(file_okay=False, path_type=Path), envvar="TESSERA_SHARED_DIR",
              required=True, help="Where to write identity.json and memory.json. [TESSERA_SHARED_DIR]")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def serve(shared_folder: Path, command: tuple[str, ...]) -> None:
    """Write the device's NVML identity, then run COMMAND (the model server) and watch device memory."""
    sys.exit(run_server(list(command), shared_folder))


if __name__ == "__main__":
    main()

