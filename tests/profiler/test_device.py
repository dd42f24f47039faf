"""The device's identity: read in the server's container, checked by the profiler; without a GPU, a result."""

import sys
import threading

import pytest

from tessera.profiler.job import profile
from tessera.profiler.nvml import (
    IDENTITY_FILE, IdentityFile, mig_profile_from_attributes, mismatch, nvml_available, product_matches,
)
from tessera.profiler.results import DeviceIdentity, ExitCode, FailureKind, SweepResult, Target
from tessera.profiler.server_wrapper import run_server
from tessera.profiler.sweep import SweepSettings

TARGET = Target(variant="resnet50", gpu="A100-80GB", mig_profile="1g.10gb", batches=(1, 2))
A100_1G = DeviceIdentity(product="NVIDIA A100-SXM4-80GB", mig_profile="1g.10gb", uuid="MIG-1", driver="550.54",
                         memory_mb=9728)
NO_SERVER = "http://127.0.0.1:9"  # nothing listens: the device check must answer before any request


@pytest.mark.skipif(nvml_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_wrapper_writes_nvml_unavailable_and_runs_the_server(tmp_path):
    code = run_server([sys.executable, "-c", "raise SystemExit(7)"], tmp_path)
    assert code == 7  # the server's own exit code
    written = IdentityFile.model_validate_json((tmp_path / IDENTITY_FILE).read_text())
    assert written.identity is None and written.unavailable.startswith("NVML unavailable")


def run_against(folder, target=TARGET) -> tuple[SweepResult, list[SweepResult]]:
    written: list[SweepResult] = []
    result = profile(target, NO_SERVER, "m", SweepSettings(ready_timeout_s=1), written.append,
                     shared_folder=folder, stop=threading.Event())
    return result, written


def test_no_identity_from_the_server_is_a_recorded_failure(tmp_path):
    (tmp_path / IDENTITY_FILE).write_text(IdentityFile(unavailable="NVML unavailable: no driver").model_dump_json())
    result, written = run_against(tmp_path)
    assert result.failure.kind == FailureKind.NO_DEVICE_IDENTITY and "NVML unavailable" in result.failure.message
    assert result.exit_code == ExitCode.NO_DEVICE_IDENTITY and written == [result]


def test_an_identity_that_never_comes_is_a_recorded_failure(tmp_path):
    result, _ = run_against(tmp_path)
    assert result.failure.kind == FailureKind.NO_DEVICE_IDENTITY and IDENTITY_FILE in result.failure.message


@pytest.mark.parametrize("device, why", [
    (A100_1G.model_copy(update={"mig_profile": "3g.40gb"}), "MIG profile 1g.10gb"),
    (A100_1G.model_copy(update={"product": "NVIDIA H100 80GB HBM3"}), "asked for A100-80GB"),
    (A100_1G.model_copy(update={"product": "NVIDIA A100-SXM4-40GB"}), "asked for A100-80GB"),
])
def test_the_profiler_refuses_to_report_for_another_device(tmp_path, device, why):
    (tmp_path / IDENTITY_FILE).write_text(IdentityFile(identity=device).model_dump_json())
    result, _ = run_against(tmp_path)
    assert result.failure.kind == FailureKind.DEVICE_MISMATCH and why in result.failure.message
    assert result.points == () and result.device == device


def test_the_device_asked_for_passes_the_check():
    assert mismatch(A100_1G, "A100-80GB", "1g.10gb") is None


@pytest.mark.parametrize("catalog, nvml, same", [
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("A100-80GB", "NVIDIA A100 80GB PCIe", True),
    ("A100-40GB", "NVIDIA A100-SXM4-80GB", False),
    ("H200-141GB", "NVIDIA H200", True),
    ("H100-80GB", "NVIDIA H200", False),
])
def test_nvml_product_names_match_catalog_products(catalog, nvml, same):
    assert product_matches(catalog, nvml) is same


@pytest.mark.parametrize("slices, memory_mb, name", [(1, 9856, "1g.10gb"), (3, 40192, "3g.40gb"),
                                                       (7, 81920, "7g.80gb"), (1, 4864, "1g.5gb")])
def test_mig_profile_names_follow_from_slices_and_memory(slices, memory_mb, name):
    assert mig_profile_from_attributes(slices, memory_mb) == name

