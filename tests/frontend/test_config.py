"""The frontend's config: built from a spec and a plan with the simulation's numbers, refused naming the field."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tessera import exit_codes
from tessera.cli import main
from tessera.frontend.config import frontend_config, load_config
from tessera.frontend.graph import Graph
from tessera.planner.input_files import InputError
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.simulation.entities import build_deployment
from tessera.planner.solve import PlannerOptions, plan
from tessera.planner.spec_file import load_systems


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The tiny two-task system of the simulation's CLI test, planned on 2 x H100 (a few seconds)."""
    from simulation.test_simulate_cli import tiny_system

    (system,) = load_systems(tiny_system(tmp_path_factory.mktemp("tiny")))
    system = system.model_copy(update={"edges": [e.model_copy(update={"mode": "split", "split_output": "boxes"})
                                                 for e in system.edges]})
    pool = Pool(gpu="H100-80GB", gpus=2)
    store = build_profile_store([system], pool.gpu)
    return system, plan([system], pool, store, options=PlannerOptions(time_limit_s=20)), store


def test_a_config_from_a_plan_weights_each_configuration_by_its_planned_capacity(planned):
    system, plan_, store = planned
    config = frontend_config(system, plan_, lambda task, index, c: f"http://{task.task}-{index}.svc:8000/v2/x/infer",
                             store)
    for task_plan in plan_.tasks:
        route = next(t for t in config.tasks if t.name == task_plan.task)
        assert sum(c.weight for c in route.configurations) == pytest.approx(task_plan.capacity_rps)
    assert [e.mode for e in config.edges] == ["split"]


def test_a_config_from_a_plan_drops_by_the_simulations_least_times(planned):
    system, plan_, store = planned
    config = frontend_config(system, plan_, lambda task, index, c: "http://x:8000/v2/models/m/infer", store,
                             hop_ms=0.0)
    deployment = build_deployment(plan_, [system], store)
    graph = Graph(config)
    singles = {s.task: s.single_s for s in deployment.stages}
    assert graph.routes["detect"].after_s == pytest.approx(singles["classify"])
    assert graph.routes["classify"].after_s == 0.0


def test_a_bad_config_names_the_field(tmp_path):
    path = tmp_path / "frontend.yaml"
    path.write_text(yaml.safe_dump({"system": "s", "sloMilliseconds": 100, "tasks": [
        {"name": "t", "configurations": [{"name": "c", "url": "ftp://x/y", "weight": 1, "singleMilliseconds": 1}]}]}))
    with pytest.raises(InputError, match=r"tasks\.0\.configurations\.0\.url"):
        load_config(path)


def test_a_config_whose_edges_name_an_unknown_task_is_refused(tmp_path):
    path = tmp_path / "frontend.yaml"
    path.write_text(yaml.safe_dump({"system": "s", "sloMilliseconds": 100, "tasks": [
        {"name": "t", "configurations": [{"name": "c", "url": "http://x/y", "weight": 1, "singleMilliseconds": 1}]}],
        "edges": [{"source": "t", "target": "nowhere"}]}))
    with pytest.raises(InputError, match="unknown task 'nowhere'"):
        load_config(path)


def test_tessera_frontend_with_a_bad_config_exits_2_naming_it(tmp_path):
    path = Path(tmp_path / "frontend.yaml")
    path.write_text("system: [")
    result = CliRunner().invoke(main, ["frontend", str(path)])
    assert result.exit_code == exit_codes.BAD_INPUT
    assert str(path) in result.output


def test_tessera_frontend_config_writes_a_servable_config_from_a_saved_plan(tmp_path, planned):
    from simulation.test_simulate_cli import tiny_system

    system_file = tiny_system(tmp_path)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(planned[1].model_dump(mode="json")))
    result = CliRunner().invoke(main, ["frontend-config", str(system_file), str(plan_file), "--url",
                                       "http://{system}-{task}-{config}:8000/v2/models/{variant}/infer"])
    assert result.exit_code == 0, result.output
    written = tmp_path / "frontend.yaml"
    written.write_text(result.output)
    config = load_config(written)
    assert [c.url for t in config.tasks for c in t.configurations][0] == \
        "http://tiny-detect-0:8000/v2/models/detect-v/infer"


def test_tessera_frontend_config_names_an_unknown_url_placeholder(tmp_path, planned):
    from simulation.test_simulate_cli import tiny_system

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(planned[1].model_dump(mode="json")))
    result = CliRunner().invoke(main, ["frontend-config", str(tiny_system(tmp_path)), str(plan_file), "--url",
                                       "http://{service}/infer"])
    assert result.exit_code == exit_codes.BAD_INPUT
    assert "--url" in result.output and "'service'" in result.output
