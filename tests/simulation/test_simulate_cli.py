"""`tessera simulate`: plan, simulate under a trace, print the outcome, write the PNG."""

from pathlib import Path

import yaml
from click.testing import CliRunner

from tessera import exit_codes
from tessera.cli import main

FAST = ["--gpu", "H100-80GB", "--gpus", "2", "--time-limit", "20", "--levels", "4", "--duration", "30"]


def tiny_system(tmp_path: Path) -> Path:
    """Two tasks with given batch-1 profiles (10 ms, 100 req/s per compute slice), a fan-out of 2."""
    profiles = [{"task": t, "variant": f"{t}-v", "gpu": "H100-80GB", "mig_profile": "1g.10gb", "batch": 1,
                 "latency_ms": 10, "throughput_rps": 100} for t in ("detect", "classify")]
    document = {
        "apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem", "metadata": {"name": "tiny"},
        "spec": {"slo": {"latency_ms": 100}, "demand_rps": 50,
                 "tasks": [{"name": t, "variants": [{"name": f"{t}-v", "accuracy": 1.0, "memory_gb": 2}]}
                           for t in ("detect", "classify")],
                 "edges": [{"source": "detect", "target": "classify", "factor": 2.0}], "profiles": profiles},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_simulate_prints_violations_drops_and_use_and_writes_the_png(tmp_path):
    png = tmp_path / "out.png"
    result = CliRunner().invoke(main, ["simulate", str(tiny_system(tmp_path)), *FAST, "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert "tiny" in result.output
    assert "late % (no dropping)" in result.output and "dropped %" in result.output
    assert "slice use" in result.output and "busy" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_replays_a_csv_rate_series(tmp_path):
    trace = tmp_path / "rates.csv"
    trace.write_text("time_s,rate\n0,10\n10,30\n20,10\n30,10\n")
    result = CliRunner().invoke(main, ["simulate", str(tiny_system(tmp_path)), *FAST, "--trace", str(trace),
                                       "--png", str(tmp_path / "out.png")])
    assert result.exit_code == 0, result.output
    assert "Trace rates: 30 s" in result.output


def test_a_malformed_trace_file_is_bad_input_naming_the_line(tmp_path):
    trace = tmp_path / "rates.csv"
    trace.write_text("time_s,rate\n0,10\n5,minus\n")
    result = CliRunner().invoke(main, ["simulate", str(tiny_system(tmp_path)), *FAST, "--trace", str(trace)])
    assert result.exit_code == exit_codes.BAD_INPUT
    assert "rates.csv:3" in result.output
