from pathlib import Path

import pytest
from click.testing import CliRunner

from tessera.cli import main

VLLM_LORA = Path(__file__).resolve().parents[1] / "data" / "vllm-lora"  # vendored from shared/data
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "twin/workload.yaml"


def test_twin_run_cli_with_png(tmp_path):
    png = tmp_path / "t.png"
    out = CliRunner().invoke(main, ["twin", "run", str(EXAMPLE), "--png", str(png)])
    assert out.exit_code == 0, out.output
    assert "throughput tok/s" in out.output and png.stat().st_size > 1000


@pytest.mark.parametrize("command", ["run", "predict"])
def test_twin_commands_report_a_server_that_cannot_start(tmp_path, command):
    f = tmp_path / "w.yaml"
    f.write_text("model: llama\nmax_loras: 256\nmax_rank: 16\nadapters: {count: 4, ranks: [16], rates: [0.1]}\n")
    out = CliRunner().invoke(main, ["twin", command, str(f)])
    assert out.exit_code == 0, out.output
    assert "refuses to start" in out.output


def test_twin_validate_cli_prints_summary_and_plots(tmp_path):
    png = tmp_path / "v.png"
    out = CliRunner().invoke(main, ["twin", "validate", "--runs-csv", str(VLLM_LORA / "qwen_runs.csv"), "--limit", "2",
                                    "--seeds", "1", "--png", str(png)])
    assert out.exit_code == 0, out.output
    assert "summary" in out.output and png.stat().st_size > 1000


def test_twin_predict_cli_shows_predictors_beside_the_twin():
    out = CliRunner().invoke(main, ["twin", "predict", str(EXAMPLE), "--twin"])
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if "throughput / offered" in line)
    predicted, simulated = (float(x) for x in row.replace("│", " ").split()[-2:])
    assert abs(predicted - simulated) < 0.05



def test_twin_memory_cli_compares_each_shipped_memory_model_with_the_measured_start_ups():
    out = CliRunner().invoke(main, ["twin", "memory", "--kv-csv", str(VLLM_LORA / "kv_capacity.csv")])
    assert out.exit_code == 0, out.output
    assert out.output.count("42/42") == 2  # qwen and llama: every refusal to start predicted
