"""`tessera operator`'s command line becomes the operator's configuration."""

from __future__ import annotations

import click
from click.testing import CliRunner

from tessera.operator.demand.settings import DemandSettings
from tessera.operator.settings import OperatorSettings
from tessera.operator_cli import operator, operator_settings
from tessera.planner.solve import PlannerOptions


def settings_for(*args: str):
    params = operator.make_context("operator", list(args)).params
    params.pop("kubeconfig")
    return operator_settings(params)


def test_the_operator_plans_with_the_planners_defaults_when_given_no_option():
    assert settings_for().planner == PlannerOptions()


def test_every_approximation_of_the_planner_has_its_switch_back_to_exact_on_the_operators_command_line():
    planner = settings_for("--tier-ratio", "1", "--busy-instances", "0", "--exact-up-to", "64", "--levels", "20").planner
    assert (planner.tier_ratio, planner.busy_instances, planner.exact_up_to_gpus, planner.budget_levels) == (1, 0, 64, 20)


def test_the_solver_limits_and_grids_reach_the_operators_planner():
    planner = settings_for("--solve-time-limit", "30", "--batches", "1,8,64,128", "--max-mps", "2",
                           "--slice-tolerance", "2", "--headroom", "0.2").planner
    assert planner.time_limit_s == 30 and planner.batches == (1, 8, 64, 128) and planner.max_mps == 2
    assert planner.slice_tolerance == 2 and planner.headroom == 0.2


def test_the_change_price_and_the_bound_on_nodes_changed_reach_the_operators_planner():
    planner = settings_for("--reconfigure-s", "300", "--change-horizon-s", "600", "--max-nodes-changed", "1").planner
    assert (planner.reconfigure_s, planner.change_horizon_s, planner.max_nodes_changed) == (300, 600, 1)
    assert planner.change_share == 0.5


def test_the_operators_planner_decomposes_by_default_and_joint_only_switches_it_off():
    assert settings_for().planner.decompose
    assert not settings_for("--joint-only").planner.decompose


def test_demand_options_still_reach_the_demand_settings():
    settings = settings_for("--prometheus-url", "http://prometheus:9090", "--demand-dry-run", "--namespace", "team-a")
    assert str(settings.demand.prometheus_url) == "http://prometheus:9090/" and settings.demand.dry_run
    assert settings.namespaces == ["team-a"]


# Flag parameter -> (model, field) where the names differ; every other numeric flag is named after its field.
RENAMED = {"prometheus_timeout_s": (DemandSettings, "timeout_s"), "demand_poll_s": (DemandSettings, "poll_s")}


def field_of(name: str):
    if name in RENAMED:
        return RENAMED[name]
    for model in (OperatorSettings, DemandSettings):
        if name in model.model_fields:
            return model, name
    return None


def model_bounds(model, name: str) -> dict:
    bounds = {"min": None, "max": None, "min_open": False, "max_open": False}
    for rule in model.model_fields[name].metadata:
        for attr, key, open_ in (("ge", "min", False), ("gt", "min", True), ("le", "max", False), ("lt", "max", True)):
            if hasattr(rule, attr):
                bounds[key], bounds[f"{key}_open"] = getattr(rule, attr), open_
    return bounds


def test_every_numeric_operator_flag_has_the_bounds_of_its_settings_field():
    compared, drifted = [], []
    for param in operator.params:
        found = field_of(param.name)
        if found is None or not isinstance(param.type, click.types._NumberRangeBase):
            continue
        flag = {k: getattr(param.type, k) for k in ("min", "max", "min_open", "max_open")}
        compared.append(param.name)
        if flag != model_bounds(*found):
            drifted.append((param.name, flag, model_bounds(*found)))
    assert drifted == []
    assert {"resync_s", "lease_duration_s", "debounce_s", "demand_poll_s", "scale_down_step"} <= set(compared)


def test_a_resync_below_one_second_the_settings_allow_is_taken_on_the_command_line():
    assert settings_for("--resync", "0.5").resync_s == 0.5


def test_a_resync_of_zero_is_refused_naming_the_flag():
    result = CliRunner().invoke(operator, ["--resync", "0"])
    assert result.exit_code == 2 and "--resync" in result.output
