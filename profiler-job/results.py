"""The profiler's result: what it measured, on which device, and how it ended.

One `SweepResult` is the profiler's whole output. It is written, as compact
JSON of at most `TERMINATION_MESSAGE_LIMIT` bytes, to the container's
termination message, on success and on failure alike; handed back to a
later profiler run, it is also what that run resumes from (the batches it
holds are not measured again). A deterministic failure (a server that never
becomes ready, an error or out of memory at one batch size, a device that is
not the one asked for) is a `Failure` in the result and an exit code from
`ExitCode`, never a retry.
"""

from __future__ import annotations

import re
from enum import Enum, IntEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

RESULT_VERSION = 1
TERMINATION_MESSAGE_LIMIT = 4096  # bytes: Kubernetes keeps at most 4 KiB of a termination message
MESSAGE_LIMIT = 400  # characters of a server's error message kept in a Failure
MAX_BATCHES = 16  # batch sizes per Job: their result, a device and a failure stay within 4 KiB
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class ExitCode(IntEnum):
    """The profiler container's exit codes; every non-zero one is deterministic (FailJob, no retry)."""

    COMPLETE = 0  # every requested batch size measured
    USAGE = 2  # the profiler's own settings are malformed
    NOT_READY = 10  # the server never became ready (or exited) before the readiness deadline
    BATCH_FAILED = 11  # the server answered an error at one batch size
    OUT_OF_MEMORY = 12  # the server ran out of device memory at one batch size
    BATCH_MISMATCH = 13  # the server ran batches of another size than the profiler sent
    DEVICE_MISMATCH = 14  # the device the server sees is not the one asked for
    NO_DEVICE_IDENTITY = 15  # no identity from the server's container (NVML unavailable there)
    INTERRUPTED = 16  # stopped (SIGTERM, deadline) part way: the result holds what was measured


class FailureKind(str, Enum):
    NOT_READY = "not_ready"
    BATCH_FAILED = "batch_failed"
    OUT_OF_MEMORY = "out_of_memory"
    BATCH_MISMATCH = "batch_mismatch"
    DEVICE_MISMATCH = "device_mismatch"
    NO_DEVICE_IDENTITY = "no_device_identity"
    INTERRUPTED = "interrupted"

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode[self.name]


class Target(BaseModel):
    """What one profiler Job measures: a variant on one segment type, at these batch sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: str
    image: str = Field(default="", max_length=512, description="The variant's image reference, as its spec names it.")
    image_digest: str = Field(
        default="", max_length=80,
        description="The image's `sha256:` digest where known: pinned in the reference, or as Kubernetes reported "
                    "it (a pod's imageID). Empty while unknown.")
    gpu: str = Field(description="GPU product as the planner's catalog names it, e.g. A100-80GB.")
    mig_profile: str = Field(description="MIG profile, e.g. 1g.10gb; empty for a whole GPU.")
    mps: int = Field(default=1, ge=1, description="Server processes sharing the segment.")
    batches: tuple[int, ...] = Field(min_length=1, max_length=MAX_BATCHES,
                                     description="Batch sizes to measure, at most MAX_BATCHES (the result's 4 KiB).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_image(cls, data: Any) -> Any:
        """Results stored before digests held the image reference in `image_digest`: it moves to `image`."""
        if isinstance(data, dict) and not data.get("image"):
            held = data.get("image_digest") or data.get("imageDigest")
            if isinstance(held, str) and held and not DIGEST.fullmatch(held):
                data = {**{k: v for k, v in data.items() if k not in ("image_digest", "imageDigest")}, "image": held}
        return data


class DeviceIdentity(BaseModel):
    """What NVML says about the device the server's container sees."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    product: str = Field(description="NVML product name, e.g. 'NVIDIA A100-SXM4-80GB'.")
    mig_profile: str = Field(default="", description="MIG profile of the instance, e.g. 1g.10gb; empty if none.")
    uuid: str
    driver: str
    memory_mb: float


class Point(BaseModel):
    """One batch size, measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int = Field(ge=1)
    p50_ms: float = Field(gt=0, description="Median batch latency with every process busy.")
    p99_ms: float = Field(gt=0)
    throughput_rps: float = Field(gt=0, description="Requests (rows) per second of the whole segment.")
    peak_memory_mb: float | None = Field(default=None, description="Device memory peak so far, where NVML has it.")
    requests: int = Field(ge=1, description="Batched requests timed at this batch size.")


class Failure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FailureKind
    batch: int | None = Field(default=None, description="The batch size it failed at, if any.")
    message: str = Field(max_length=MESSAGE_LIMIT)

    @classmethod
    def of(cls, kind: FailureKind, message: str, batch: int | None = None) -> "Failure":
        return cls(kind=kind, batch=batch, message=message[:MESSAGE_LIMIT])


class SweepResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = RESULT_VERSION
    target: Target
    device: DeviceIdentity | None = None
    points: tuple[Point, ...] = ()
    failure: Failure | None = None

    @property
    def exit_code(self) -> ExitCode:
        return self.failure.kind.exit_code if self.failure else ExitCode.COMPLETE

    def measured_batches(self) -> set[int]:
        return {p.batch for p in self.points}

    def remaining_batches(self) -> tuple[int, ...]:
        done = self.measured_batches()
        return tuple(b for b in self.target.batches if b not in done)

    def termination_message(self) -> str:
        """Compact JSON within 4 KiB; raises ValueError if even that cannot hold it."""
        text = self.model_dump_json(exclude_none=True)
        if len(text.encode()) > TERMINATION_MESSAGE_LIMIT:
            raise ValueError(f"result of {len(text.encode())} bytes exceeds the {TERMINATION_MESSAGE_LIMIT}-byte "
                             f"termination message; profile fewer batch sizes per Job")
        return text

    @classmethod
    def from_termination_message(cls, text: str) -> "SweepResult":
        return cls.model_validate_json(text)
