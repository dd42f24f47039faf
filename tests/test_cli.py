"""The `tessera` command line, run in-process on tiny files and pools."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tessera.cli import main
from tessera.exit_codes import BAD_INPUT
from tessera.planner.capacity import CapacityTable
from tessera.planner.catalog import gpu_product
from tessera.planner.plan import Plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GPU = "H100-80GB"
FAST = ["--gpu", GPU, "--time-limit", "20", "--levels", "4"]


def system_document(name="tiny", demand=100, latency_ms=100, edges=None, tasks=("detect", "classify")):
    """A CompoundInferenceSystem with given batch-1 profiles: 100 req/s per compute slice, 10 ms."""
    profiles = [
        {"task": t, "variant": f"{t}-v", "gpuProduct": GPU, "migProfile": p.name, "batchSize": 1,
         "latencyMilliseconds": 10, "throughputRequestsPerSecond": 100 * p.compute_slices}
        for t in tasks for p in gpu_product(GPU).profiles
    ]
    return {
        "apiVersion": "tessera.ai/v1alpha1",
        "kind": "CompoundInferenceSystem",
        "metadata": {"name": name},
        "spec": {
            "slo": {"latencyMilliseconds": latency_ms},
            "demandRequestsPerSecond": demand,
            "tasks": [{"name": t, "variants": [{"name": f"{t}-v", "accuracy": 1.0, "gpuMemoryGigabytes": 2}]} for t in tasks],
            "edges": edges if edges is not None else [{"source": tasks[0], "target": tasks[1]}],
            "profiles": profiles,
        },
    }


@pytest.fixture
def write(tmp_path):
    def write(document, name="system.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(document))
        return path
    return write


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_plan_json_output_is_a_valid_plan(write):
    result = invoke("plan", write(system_document()), *FAST, "--gpus", 2, "--output", "json")
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert plan.fully_served
    assert (plan.gpu, plan.pool_gpus, plan.features) == (GPU, 2, "A+S+T")
    assert {t.task for t in plan.tasks} == {"detect", "classify"}


def test_plan_yaml_output_is_a_valid_plan(write):
    result = invoke("plan", write(system_document()), *FAST, "--gpus", 2, "--output", "yaml")
    assert result.exit_code == 0, result.output
    assert Plan.model_validate(yaml.safe_load(result.stdout)).fully_served


def test_plan_of_an_example_file_serves_it():
    result = invoke("plan", EXAMPLES / "single-model.yaml", *FAST, "--gpus", 2, "--output", "json")
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert plan.fully_served and plan.systems[0].system == "single-model"


def test_plan_table_names_every_task_and_the_mig_layout(write):
    result = invoke("plan", write(system_document()), *FAST, "--gpus", 2)
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(
        invoke("plan", write(system_document()), *FAST, "--gpus", 2, "--output", "json").stdout))
    for task in ("detect", "classify"):
        assert task in result.stdout
    assert "MIG layouts" in result.stdout
    for gpu in plan.gpus:
        for name, count in gpu.layout:
            assert f"{count}x {name}" in result.stdout


def test_plan_of_two_systems_says_they_were_planned_apart_and_joint_only_solves_them_together(write):
    files = [write(system_document(name=name), f"{name}.yaml") for name in ("one", "two")]
    apart = invoke("plan", *files, *FAST, "--gpus", 2)
    assert apart.exit_code == 0, apart.output
    assert "decomposed" in apart.stdout
    together = invoke("plan", *files, *FAST, "--gpus", 2, "--joint-only", "--output", "json")
    assert Plan.model_validate(json.loads(together.stdout)).solver.method == "joint"


def test_plan_features_switch_reaches_the_planner(write):
    result = invoke("plan", write(system_document()), *FAST, "--gpus", 2, "--features", "a+t", "--output", "json")
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert plan.features == "A+T"
    assert {g.layout[0][0] for g in plan.gpus} == {"7g.80gb"}


def test_a_file_with_a_cycle_exits_non_zero_naming_the_file_and_field(write):
    document = system_document(edges=[{"source": "detect", "target": "classify"},
                                      {"source": "classify", "target": "detect"}])
    path = write(document, "cyclic.yaml")
    result = invoke("plan", path, *FAST, "--gpus", 1)
    assert result.exit_code == BAD_INPUT
    assert str(path) in result.output
    assert "edges" in result.output and "cycle" in result.output


def test_a_negative_latency_slo_exits_non_zero_naming_the_file_and_field(write):
    path = write(system_document(latency_ms=-1), "negative.yaml")
    result = invoke("plan", path, *FAST, "--gpus", 1)
    assert result.exit_code == BAD_INPUT
    assert str(path) in result.output
    assert "slo.latencyMilliseconds" in result.output
    assert "Traceback" not in result.output


def test_a_profile_naming_an_unknown_variant_exits_non_zero_naming_the_file(write):
    document = system_document()
    document["spec"]["profiles"][0]["variant"] = "ghost"
    path = write(document, "ghost.yaml")
    result = invoke("plan", path, *FAST, "--gpus", 1)
    assert result.exit_code == BAD_INPUT
    assert str(path) in result.output and "ghost" in result.output


def test_systems_named_alike_in_two_files_are_rejected(write):
    first = write(system_document(), "one.yaml")
    second = write(system_document(), "two.yaml")
    result = invoke("plan", first, second, *FAST, "--gpus", 1)
    assert result.exit_code == BAD_INPUT
    assert "system names repeat" in result.output


def test_a_bad_features_value_is_a_usage_error_naming_the_letter(write):
    result = invoke("plan", write(system_document()), *FAST, "--features", "A+X")
    assert result.exit_code == 2
    assert "--features" in result.output and "'X'" in result.output


def test_an_unknown_gpu_product_is_a_usage_error(write):
    result = invoke("plan", write(system_document()), "--gpu", "T4")
    assert result.exit_code == 2


def test_a_partially_served_plan_exits_3_and_still_prints_the_plan(write):
    result = invoke("plan", write(system_document(demand=2000, tasks=("solo",), edges=[])), *FAST,
                    "--gpus", 1, "--output", "json")
    assert result.exit_code == 3, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert not plan.fully_served
    assert plan.diagnosis and "serves at most" in plan.diagnosis[0]


def capacity_json(write):
    result = invoke("capacity", write(system_document(tasks=("solo",), edges=[])), *FAST, "--gpus", 1,
                    "--features", "unopt,A+S+T", "--output", "json")
    assert result.exit_code == 0, result.output
    return result


def test_capacity_json_lists_each_requested_feature_subset(write):
    table = CapacityTable.model_validate(json.loads(capacity_json(write).stdout))
    assert [row.features for row in table.rows] == ["Unopt", "A+S+T"]
    assert (table.gpu, table.gpus) == (GPU, 1)
    scales = {row.features: row.scale for row in table.rows}
    # Unopt: one whole GPU of 700 req/s; A+S+T fills the same slices: no gain for one task.
    assert scales["Unopt"] == pytest.approx(700 / 1.1 / 100, rel=1e-3)
    assert table.ratio("A+S+T", "Unopt") == pytest.approx(scales["A+S+T"] / scales["Unopt"])
    assert table.rows[0].max_demand_rps == {"tiny": pytest.approx(100 * scales["Unopt"])}


def test_capacity_json_gives_the_ratios_to_the_baselines(write):
    rows = json.loads(capacity_json(write).stdout)["rows"]
    assert all(any("ratio" in key for key in row) for row in rows), rows


def test_capacity_markdown_gives_the_ratio_to_unopt(write):
    result = invoke("capacity", write(system_document(tasks=("solo",), edges=[])), *FAST, "--gpus", 1,
                    "--features", "unopt,A+S+T", "--output", "markdown")
    assert result.exit_code == 0, result.output
    header, rule, unopt, full = result.stdout.strip().splitlines()
    assert "x Unopt" in header
    assert unopt.startswith("| Unopt |") and "| 1.00 |" in unopt
    assert full.startswith("| A+S+T |")


def test_capacity_with_a_bad_features_value_is_a_usage_error(write):
    result = invoke("capacity", write(system_document()), *FAST, "--gpus", 1, "--features", "unopt,A+X")
    assert result.exit_code == 2, result.output
    assert "'X'" in result.output


def test_a_system_no_plan_serves_at_all_exits_3_with_the_outcome_and_diagnosis(write):
    # each stage takes at least 2 x 10 ms: the two-task path needs 40 ms, the SLO allows 30
    result = invoke("plan", write(system_document(latency_ms=30)), *FAST, "--gpus", 1, "--output", "json")
    assert result.exit_code == 3, result.output
    outcome = json.loads(result.stdout)
    assert outcome["kind"] == "infeasible" and outcome["plan"] is None
    assert "fastest choices take 40.0 ms" in result.stderr


def test_a_variant_without_profiles_or_figures_exits_2_naming_it(write):
    document = system_document()
    document["spec"]["profiles"] = [p for p in document["spec"]["profiles"] if p["task"] != "classify"]
    result = invoke("plan", write(document), *FAST, "--gpus", 1)
    assert result.exit_code == 2, result.output
    assert "variant 'classify-v'" in result.stderr


@pytest.mark.parametrize("option, value", [("--batches", "1,0"), ("--batches", "four"), ("--max-mps", "0")])
def test_a_bad_grid_option_is_a_usage_error(write, option, value):
    result = invoke("plan", write(system_document()), option, value)
    assert result.exit_code == 2 and option in result.output


@pytest.fixture
def measurements() -> Path:
    return Path(__file__).resolve().parent / "data" / "parvagpu-a100-mig"  # vendored from shared/data


def test_batches_and_max_batch_reach_the_planner(write, measurements):
    # BERT measured on an A100: batch 128 serves 14% more per instance than 16 or 32; a demand that fills it
    document = {"apiVersion": "tessera.ai/v1alpha1", "kind": "CompoundInferenceSystem", "metadata": {"name": "qa"},
                "spec": {"slo": {"latencyMilliseconds": 2000}, "demandRequestsPerSecond": 20000,
                         "tasks": [{"name": "answer", "variants": [{"name": "bert", "accuracy": 1.0,
                                                                      "gpuMemoryGigabytes": 4}]}]}}
    common = ["--gpu", "A100-80GB", "--gpus", 8, "--measured", measurements, "--time-limit", 30, "--output", "json"]
    wide = Plan.model_validate(json.loads(invoke("plan", write(document), *common, "--batches", "1,32,64,128").stdout))
    capped = Plan.model_validate(json.loads(invoke("plan", write(document), *common, "--batches", "1,32,64,128",
                                                   "--max-batch", 64).stdout))
    assert max(c.batch for t in wide.tasks for c in t.configs) > 32
    assert max(c.batch for t in capped.tasks for c in t.configs) <= 64


def test_plan_refuses_a_negative_bound_on_nodes_changed(write):
    result = invoke("plan", write(system_document()), *FAST, "--max-nodes-changed", -1)
    assert result.exit_code == 2 and "--max-nodes-changed" in result.output
