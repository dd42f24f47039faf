"""`tessera place`: reads an AdapterPool, prints servers and the comparison, exits by the documented codes."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from tessera import exit_codes
from tessera.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools" / "support-bots.yaml"


def test_place_prints_every_adapter_on_one_server_with_flags_and_the_baselines_as_json():
    result = CliRunner().invoke(main, ["place", str(EXAMPLE), "--no-twin", "--output", "json"])
    assert result.exit_code == exit_codes.OK, result.output
    report = json.loads(result.stdout)
    pool = yaml.safe_load(EXAMPLE.read_text())
    placed = [n for s in report["placement"]["servers"] for n in s["adapters"]]
    assert sorted(placed) == sorted(a["name"] for a in pool["spec"]["adapters"])
    assert all(s["max_loras"] >= 1 and s["max_lora_rank"] >= 8 for s in report["placement"]["servers"])
    assert [b["strategy"] for b in report["baselines"]] == ["maxbase", "maxbase*", "dlora", "random"]
    assert report["lowerBound"]["servers"] <= report["placement"]["servers_used"]


def test_place_table_names_the_servers_and_the_lower_bound():
    result = CliRunner().invoke(main, ["place", str(EXAMPLE), "--no-twin", "--baselines", "maxbase"])
    assert result.exit_code == exit_codes.OK, result.output
    assert "--max-loras" in result.output and "lower bound" in result.output and "maxbase" in result.output


def test_a_pool_with_an_adapter_without_rank_is_bad_input_naming_the_field(tmp_path):
    pool = yaml.safe_load(EXAMPLE.read_text())
    del pool["spec"]["adapters"][3]["rank"]
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool))
    result = CliRunner().invoke(main, ["place", str(path), "--no-twin"])
    assert result.exit_code == exit_codes.BAD_INPUT
    assert "spec.adapters[3].rank" in result.output


def test_adapters_beyond_max_servers_make_the_placement_infeasible(tmp_path):
    pool = yaml.safe_load(EXAMPLE.read_text())
    pool["spec"]["limits"]["maxServers"] = 1
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool))
    result = CliRunner().invoke(main, ["place", str(path), "--no-twin", "--output", "yaml"])
    assert result.exit_code == exit_codes.INFEASIBLE
    assert yaml.safe_load(result.stdout)["placement"]["unplaced"]


def test_place_against_a_previous_placement_reports_how_many_adapters_move(tmp_path):
    first = CliRunner().invoke(main, ["place", str(EXAMPLE), "--no-twin", "--output", "json", "--baselines", ""])
    previous = tmp_path / "previous.json"
    previous.write_text(first.stdout)
    pool = yaml.safe_load(EXAMPLE.read_text())
    for adapter in pool["spec"]["adapters"]:
        adapter["expectedRequestsPerSecond"] *= 1.1
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool))
    result = CliRunner().invoke(main, ["place", str(path), "--no-twin", "--previous", str(previous)])
    assert result.exit_code == exit_codes.OK, result.output
    assert "re-placed:" in result.output and "adapters move" in result.output
    as_json = CliRunner().invoke(main, ["place", str(path), "--no-twin", "--previous", str(previous),
                                        "--output", "json", "--baselines", ""])
    assert json.loads(as_json.stdout)["replacement"]["moves"] <= 0.05 * len(pool["spec"]["adapters"])
