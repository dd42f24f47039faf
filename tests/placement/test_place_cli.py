"""`tessera place`: reads an AdapterPool, prints servers and the comparison, exits by the documented codes."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from tessera import exit_codes
from tessera.cli import main
from tessera.place_cli import placement_failure
from tessera.planner.placement import AdapterDemand, PlacementProblem, place
from tessera.planner.placement.scenarios import Scenario, problem_of

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


def _pool_file(tmp_path, adapters, min_served_fraction=0.9):
    """The example pool with these adapters (name, rank, req/s) in place of its own."""
    pool = yaml.safe_load(EXAMPLE.read_text())
    weights = pool["spec"]["adapters"][0]["weights"]
    pool["spec"]["adapters"] = [{"name": name, "rank": rank, "expectedRequestsPerSecond": rate, "weights": dict(weights)}
                                for name, rank, rate in adapters]
    pool["spec"]["serviceBound"]["minServedFraction"] = min_served_fraction
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool))
    return path


def test_a_placement_the_twin_check_fails_exits_infeasible_naming_the_server_and_its_adapters(tmp_path):
    """One adapter at 80 req/s: no server carries it alone (the twin starves it) and it cannot be split."""
    path = _pool_file(tmp_path, [("hot", 16, 80.0), ("cold-1", 8, 0.5), ("cold-2", 8, 0.5)])
    result = CliRunner().invoke(main, ["place", str(path), "--baselines", "", "--output", "json"])
    assert result.exit_code == exit_codes.INFEASIBLE
    assert "infeasible: server 0 (1 adapter, 80.00 req/s) fails the twin check: starved" in result.stderr
    assert "under the service bound (worst served" in result.stderr and ": hot" in result.stderr
    assert json.loads(result.stdout)["placement"]["twin_ok"] is False


def test_place_serves_issue_26s_64_adapter_pool_on_one_server_that_the_predictors_alone_split_in_two(tmp_path):
    problem = problem_of(Scenario(64, 28.0, "qwen", 0.3))
    path = _pool_file(tmp_path, [(a.name, a.rank, a.rate_rps) for a in problem.adapters])
    checked = CliRunner().invoke(main, ["place", str(path), "--baselines", "", "--output", "json"])
    predictors_only = CliRunner().invoke(main, ["place", str(path), "--baselines", "", "--output", "json", "--no-twin"])
    assert checked.exit_code == predictors_only.exit_code == exit_codes.OK, checked.output
    report = json.loads(checked.stdout)
    assert report["placement"]["servers_used"] == 1 and report["placement"]["twin_ok"]
    assert report["gate"]["moves_kept"] == 1
    assert json.loads(predictors_only.stdout)["placement"]["servers_used"] == 2
    assert json.loads(predictors_only.stdout)["gate"] is None


def test_an_infeasible_placement_names_five_failing_servers_and_counts_the_rest():
    hot = tuple(AdapterDemand(f"hot-{i}", 16, 70.0) for i in range(7))  # each starves a server alone
    failure = placement_failure(place(PlacementProblem(hot, "qwen")))
    assert failure.count("is predicted unhealthy") == 5 and failure.endswith("; and 2 more servers")
