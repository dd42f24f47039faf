"""`tessera operator`'s command line becomes the operator's configuration."""

from __future__ import annotations

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


def test_demand_options_still_reach_the_demand_settings():
    settings = settings_for("--prometheus-url", "http://prometheus:9090", "--demand-dry-run", "--namespace", "team-a")
    assert str(settings.demand.prometheus_url) == "http://prometheus:9090/" and settings.demand.dry_run
    assert settings.namespaces == ["team-a"]
