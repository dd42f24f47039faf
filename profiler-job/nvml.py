"""The device's identity and memory, from NVML (nvidia-ml-py), and the check against what was asked.

Only the container that requests the MIG instance sees the device, so the
server's container reads the identity (`identity_cli` writes it to a shared
folder) and the profiler compares it with its target before it reports.
Without a GPU or a driver, `read_identity` raises `NvmlUnavailable` with
NVML's own reason: a result, never a crash.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tessera.profiler.results import DeviceIdentity

IDENTITY_FILE = "identity.json"
MEMORY_FILE = "memory.json"
MIG_NAME = re.compile(r"\bMIG\s+(\S+)")
MEMORY_IN_NAME = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no library, no driver, no device)."""


class IdentityFile(BaseModel):
    """What the server's container writes: the identity, or why NVML could not give it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    identity: DeviceIdentity | None = None
    unavailable: str | None = None


def _nvml():
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable(f"NVML unavailable: nvidia-ml-py is not installed ({error})") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML unavailable: {error}") from None
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_profile_from_attributes(gpu_slices: int, memory_mb: float) -> str:
    """NVIDIA's profile name from a MIG device's slices and memory (1, 9856 MiB -> 1g.10gb)."""
    return f"{gpu_slices}g.{math.ceil(memory_mb / 1024)}gb"


def _visible_device(pynvml):
    """The first MIG device of the first GPU in MIG mode, else the first GPU; and whether it is MIG."""
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        raise NvmlUnavailable("NVML unavailable: no GPU visible to this container")
    for index in range(count):
        parent = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            current, _ = pynvml.nvmlDeviceGetMigMode(parent)
        except pynvml.NVMLError:
            current = 0
        if current:
            for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
                try:
                    return parent, pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, mig_index)
                except pynvml.NVMLError:
                    continue
    return pynvml.nvmlDeviceGetHandleByIndex(0), None


def read_identity() -> DeviceIdentity:
    """Product, MIG profile, UUID, driver and memory of the device this container sees."""
    pynvml = _nvml()
    try:
        parent, mig = _visible_device(pynvml)
        device = mig if mig is not None else parent
        memory_mb = pynvml.nvmlDeviceGetMemoryInfo(device).total / 2**20
        profile = ""
        if mig is not None:
            match = MIG_NAME.search(_text(pynvml.nvmlDeviceGetName(mig)))
            if match:
                profile = match.group(1)
            else:
                attributes = pynvml.nvmlDeviceGetAttributes(mig)
                profile = mig_profile_from_attributes(attributes.gpuInstanceSliceCount, attributes.memorySizeMB)
        return DeviceIdentity(product=_text(pynvml.nvmlDeviceGetName(parent)), mig_profile=profile,
                              uuid=_text(pynvml.nvmlDeviceGetUUID(device)),
                              driver=_text(pynvml.nvmlSystemGetDriverVersion()), memory_mb=round(memory_mb, 1))
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML unavailable: {error}") from None
    finally:
        pynvml.nvmlShutdown()


def nvml_available() -> bool:
    try:
        read_identity()
        return True
    except NvmlUnavailable:
        return False


def identity_or_reason() -> IdentityFile:
    try:
        return IdentityFile(identity=read_identity())
    except NvmlUnavailable as error:
        return IdentityFile(unavailable=str(error))


class MemorySampler:
    """Device memory in use on the visible device, for the peak a sweep reaches."""

    def __init__(self):
        self._pynvml = _nvml()
        parent, mig = _visible_device(self._pynvml)
        self._device = mig if mig is not None else parent
        self.peak_mb = 0.0

    def sample(self) -> float:
        used = self._pynvml.nvmlDeviceGetMemoryInfo(self._device).used / 2**20
        self.peak_mb = max(self.peak_mb, used)
        return used

    def close(self) -> None:
        self._pynvml.nvmlShutdown()


def write_json(path: Path, document: BaseModel | dict) -> None:
    """Write atomically, so a reader in the other container never sees half a file."""
    text = document.model_dump_json() if isinstance(document, BaseModel) else json.dumps(document)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def read_peak_memory(folder: Path) -> float | None:
    """The peak the server's container has written, or None where NVML has none."""
    try:
        return float(json.loads((folder / MEMORY_FILE).read_text())["peak_mb"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def product_matches(catalog_product: str, nvml_product: str) -> bool:
    """Whether NVML's product name is the catalog's product ('A100-80GB' ~ 'NVIDIA A100-SXM4-80GB').

    The family (A100, H100, H200) must appear in NVML's name, and where both
    names state a memory size in GB, they must agree.
    """
    family, _, memory = catalog_product.partition("-")
    if family.upper() not in nvml_product.upper():
        return False
    stated = MEMORY_IN_NAME.search(nvml_product)
    wanted = MEMORY_IN_NAME.search(memory)
    return not (stated and wanted) or stated.group(1) == wanted.group(1)


def mismatch(identity: DeviceIdentity, gpu: str, mig_profile: str) -> str | None:
    """Why this device is not (gpu, mig_profile), or None if it is."""
    if not product_matches(gpu, identity.product):
        return f"asked for {gpu}, the server's device is {identity.product!r} ({identity.uuid})"
    if identity.mig_profile != mig_profile:
        asked = mig_profile or "a whole GPU"
        seen = identity.mig_profile or "a whole GPU"
        return f"asked for MIG profile {asked}, the server's device is {seen} ({identity.uuid})"
    return None
