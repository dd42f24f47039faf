"""bench/gpu_profile.py, the script prepared for a lent GPU machine, runs cleanly where there is none."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.profiler.nvml import nvml_available

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_profile.py"


@pytest.mark.skipif(nvml_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_script_reports_nvml_unavailable_and_exits_0(tmp_path):
    completed = subprocess.run([sys.executable, "-P", str(SCRIPT), "--results", str(tmp_path)],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "gpu_profile.json").read_text())
    assert result["nvml"].startswith("NVML unavailable")
    assert "NVML unavailable" in (tmp_path / "gpu_profile.md").read_text()
