"""The plan's words for its latency model (tessera.render)."""

from tessera.planner.latency import Routing
from tessera.planner.plan import ConfigPlan, Plan, SolverReport, TaskPlan
from tessera.planner.profiles import ProfileSource, SegmentType
from tessera.render import latency_model


def plan_with(spreads: list[float], queueing: bool = True) -> Plan:
    configs = [ConfigPlan(segment=SegmentType(gpu="H100-80GB", mig_profile="1g.10gb"), batch=1, replicas=1,
                          batch_latency_ms=10 * s, segment_throughput_rps=100, load_rps=10,
                          stage_latency_ms=20 * s, source=ProfileSource.ESTIMATED, latency_spread=s)
               for s in spreads]
    task = TaskPlan(system="s", task="t", variant="v", normalised_accuracy=1, demand_rps=10, budget_ms=100,
                    stage_latency_ms=30, configs=configs, share_base_rps=10)
    return Plan(gpu="H100-80GB", pool_gpus=1, features="A+S+T", headroom=0.1, queueing=queueing,
                routing=Routing.PER_REQUEST, tasks=[task], gpus=[], paths=[], systems=[], gpus_used=1,
                slices_used=1, profile_sources={"estimated": len(configs)},
                solver=SolverReport(status="ok", stages=[], objective={}, mip_gap=0, build_s=0, solve_s=0,
                                    variables=0, constraints=0))


def test_the_latency_model_names_the_wait_the_routing_and_the_default_spread():
    words = latency_model(plan_with([1.0]))
    assert words == ("p99 queueing wait in rounds of batches, bulks split per request in proportion to planned "
                     "load; estimates x 1 as p99")


def test_the_latency_model_names_the_measured_spreads_estimates_took():
    assert latency_model(plan_with([1.0, 1.15])).endswith(
        "estimates x 1 as p99, x their variant's measured p99/p50 where it has one (1.15)")
