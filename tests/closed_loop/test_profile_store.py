"""The replicas-only path's profiles are built once per systems, not once per re-plan (issue 31's speed gate)."""

from tessera.closed_loop import Replanner, keyed
from tessera.planner.features import Features
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems
from tessera.shipped import example

GPU = "H100-80GB"


def _specs(demand_rps: float, name: str = "single-model.yaml"):
    return [s.model_copy(update={"demand_rps": demand_rps}) for s in keyed(load_systems(example(name)))]


def test_a_demand_change_reuses_the_profiles_and_the_seconds_their_build_took():
    replanner = Replanner(PlannerOptions(), Features())
    first = replanner.profile_store(_specs(10.0), GPU)
    assert replanner.profile_store(_specs(80.0), GPU) is first
    assert first[1] > 0


def test_other_systems_get_their_own_profiles():
    replanner = Replanner(PlannerOptions(), Features())
    assert replanner.profile_store(_specs(10.0), GPU) is not replanner.profile_store(
        _specs(10.0, "traffic-analysis.yaml"), GPU)
