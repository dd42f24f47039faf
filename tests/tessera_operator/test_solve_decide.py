"""A pool's solves and a system too large to plan (operator/reconcile/solve_decide.py, issue 29 item 5)."""

from __future__ import annotations

from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import node_facts
from tessera.operator.reconcile.solve_decide import (RunningSolve, Size, Step, alone_verdict, awaits_measurement, cut_to,
                                                     exceeds_caps, fits_caps, fitting, longer_limit, next_probe, next_solve,
                                                     settling, size_of, still_invalid, too_large, too_large_message)
from tessera.planner.contract import Infeasible, InvalidInput, Planned, PlannerFailed, TimeLimit
from tessera.planner.model import SystemSpec

from hostile.corpus import wide_spec

from .conftest import gpu_node

OUT_OF_MEMORY = PlannerFailed(reason="the plan worker ended with exit code 1 without an answer (memory cap 500 MiB)")
HIGHS_MEMORY = TimeLimit(reason="no plan found within the time limit of 20 s (HiGHS: Memory limit reached)")
CAPS = "memory cap 500 MiB, time limit 20 s"


def spec(tasks: int, variants: int) -> SystemSpec:
    document = wide_spec(tasks, variants)
    return SystemSpec.model_validate({**document["spec"], "name": document["metadata"]["name"]})


def probes(size: Size, fits: Size) -> list[Size]:
    """The sizes next_probe tries when everything up to `fits` (tasks and variants) plans and nothing larger."""
    tried: dict[Size, bool] = {}
    while (probe := next_probe(size, tried)) is not None:
        tried[probe] = probe.tasks <= fits.tasks and probe.variants <= fits.variants
    return list(tried)


def test_a_pool_without_a_running_solve_starts_one():
    assert next_solve(None, "inputs-1") is Step.START


def test_a_running_solve_of_the_current_inputs_is_waited_for():
    assert next_solve(RunningSolve("inputs-1", follows_cancel=False), "inputs-1") is Step.WAIT


def test_a_change_replaces_the_running_solve_but_never_two_in_a_row():
    assert next_solve(RunningSolve("inputs-1", follows_cancel=False), "inputs-2") is Step.REPLACE
    assert next_solve(RunningSolve("inputs-2", follows_cancel=True), "inputs-3") is Step.WAIT, \
        "the solve after a cancelled one runs to its end"


def test_a_worker_out_of_memory_and_a_time_limit_without_a_plan_exceed_the_caps_and_a_checker_failure_does_not():
    assert exceeds_caps(OUT_OF_MEMORY) and exceeds_caps(HIGHS_MEMORY)
    assert not exceeds_caps(PlannerFailed(reason="the plan failed the checker", errors=["task t0 overloaded"]))


def test_a_system_is_too_large_when_the_pools_solve_and_its_own_alone_exceed_the_caps():
    plan = Planned.model_construct(plan=None)  # an answer: the system alone fits
    assert too_large(OUT_OF_MEMORY, {"ns/large": HIGHS_MEMORY, "ns/small": plan}) == {"ns/large"}


def test_no_system_is_too_large_when_the_pools_solve_did_not_exceed_the_caps():
    failed = PlannerFailed(reason="the plan failed the checker", errors=["overloaded"])
    assert too_large(failed, {"ns/large": HIGHS_MEMORY}) == set()


RAN_OUT = TimeLimit(reason="no plan found within the time limit of 60 s")


def test_a_pools_solve_out_of_time_while_every_system_alone_was_planned_is_tried_once_more_at_twice_the_limit():
    planned = Planned.model_construct(plan=None)
    assert longer_limit(RAN_OUT, {"ns/a": planned, "ns/b": Infeasible(reason="too small")}, 60.0) == 120.0


def test_no_longer_try_where_a_system_alone_also_exceeded_the_caps_or_the_pool_ran_out_of_memory():
    planned = Planned.model_construct(plan=None)
    assert longer_limit(RAN_OUT, {"ns/a": planned, "ns/large": HIGHS_MEMORY}, 60.0) is None
    assert longer_limit(RAN_OUT, {"ns/a": planned, "ns/slow": RAN_OUT}, 60.0) is None
    assert longer_limit(OUT_OF_MEMORY, {"ns/a": planned}, 60.0) is None, "a worker out of memory needs no more time"


def test_a_size_fits_when_its_solve_ends_within_the_caps_and_a_time_limit_even_with_a_plan_does_not():
    assert fits_caps(Planned.model_construct(plan=None))
    assert not fits_caps(TimeLimit.model_construct(reason="the time limit stopped serve", plan=object()))
    assert not fits_caps(OUT_OF_MEMORY) and not fits_caps(HIGHS_MEMORY)


def test_the_size_that_fits_is_measured_from_one_variant_each_up_and_never_the_systems_own_size():
    assert probes(Size(64, 16), fits=Size(64, 1)) == [Size(64, 1), Size(64, 2)]
    assert probes(Size(64, 16), fits=Size(64, 8)) == [Size(64, 1), Size(64, 2), Size(64, 4), Size(64, 8)]


def test_where_one_variant_each_does_not_fit_the_tasks_halve_until_a_size_fits():
    assert probes(Size(64, 16), fits=Size(16, 16)) == [Size(64, 1), Size(32, 1), Size(16, 1)]
    assert probes(Size(2, 1), fits=Size(0, 0)) == [Size(1, 1)], "a system of one variant each starts halved"


def test_the_largest_size_tried_that_fit_is_the_size_that_fits():
    assert fitting({Size(64, 1): True, Size(64, 2): True, Size(64, 4): False}) == Size(64, 2)
    assert fitting({Size(64, 1): False, Size(32, 1): False}) is None


def test_a_cut_spec_keeps_the_first_tasks_and_variants_with_their_edges_and_profiles():
    document = wide_spec(3, 4)
    document["spec"]["edges"] = [{"source": "t0", "target": "t1", "factorByVariant": {"v0": 2, "v3": 3}},
                                 {"source": "t1", "target": "t2"}]
    document["spec"]["profiles"] = [
        {"task": "t0", "variant": v, "gpuProduct": "H100-80GB", "migProfile": "1g.10gb", "batchSize": 1,
         "latencyMilliseconds": 10, "throughputRequestsPerSecond": 100} for v in ("v0", "v3")]
    cut = cut_to(SystemSpec.model_validate({**document["spec"], "name": "cut"}), Size(2, 2))
    assert size_of(cut) == Size(2, 2)
    assert [(e.source, e.target, e.factor_by_variant) for e in cut.edges] == [("t0", "t1", {"v0": 2})]
    assert [(p.task, p.variant) for p in cut.profiles] == [("t0", "v0")]


def test_the_message_names_the_size_and_the_size_that_fits_and_never_the_time_limit_as_the_fix():
    message = too_large_message(size_of(spec(64, 16)), {Size(64, 1): True, Size(64, 2): False}, CAPS)
    assert "64 tasks x 16 variants" in message and "64 tasks x 1 variants" in message and CAPS in message
    assert "raise the time limit" not in message


def test_before_the_size_that_fits_is_measured_the_message_names_the_size_and_the_record_awaits_a_measurement():
    message = too_large_message(Size(64, 16), None, CAPS)
    assert "64 tasks x 16 variants" in message and awaits_measurement(st.TOO_LARGE_TO_PLAN, message)
    measured = too_large_message(Size(64, 16), {Size(64, 1): True, Size(64, 2): False}, CAPS)
    assert not awaits_measurement(st.TOO_LARGE_TO_PLAN, measured)


def test_where_nothing_fits_the_message_says_to_raise_the_memory_cap():
    message = too_large_message(Size(2, 1), {Size(1, 1): False}, CAPS)
    assert "not even 1 tasks x 1 variants" in message and "memory cap" in message


def test_a_too_large_record_holds_while_the_spec_and_the_caps_are_unchanged():
    record = {"hash": "h1", "reason": st.TOO_LARGE_TO_PLAN, "message": "...", "caps": CAPS}
    assert still_invalid(record, "h1", CAPS)
    assert not still_invalid(record, "h2", CAPS), "a fixed (smaller) spec is planned again"
    assert not still_invalid(record, "h1", "memory cap 4096 MiB, time limit 20 s"), "so is one under other caps"


def test_an_invalid_spec_record_holds_while_its_spec_is_unchanged_and_pool_access_is_decided_afresh():
    assert still_invalid({"hash": "h1", "reason": st.INVALID_SPEC, "message": "..."}, "h1", CAPS)
    assert not still_invalid({"hash": "h1", "reason": st.POOL_NOT_ALLOWED, "message": "..."}, "h1", CAPS)


# -- a system the planner cannot use -----------------------------------------------

REQUESTED = "tessera.ai/mig-config-requested"


def node(name: str, config: str, state: str, requested: str | None):
    body = gpu_node(name, extra_labels={"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state})
    body["metadata"]["annotations"] = {REQUESTED: requested} if requested else {}
    return node_facts(body, REQUESTED)


def test_the_nodes_that_settle_are_those_mig_manager_has_not_answered_the_layout_tessera_asked_for():
    nodes = [node("gpu-a", "tessera-v1-1", "pending", "tessera-v1-1"), node("gpu-b", "tessera-v1-1", "success",
                                                                           "tessera-v1-1"),
             node("gpu-c", "admins-own", "pending", None), node("gpu-d", "tessera-v1-2", "failed", "tessera-v1-2")]
    assert settling(nodes) == ["gpu-a"]


def test_a_system_that_serves_nothing_alone_is_slo_unreachable_but_not_while_nodes_of_the_pool_settle():
    """A solve on a pool whose node is being re-partitioned sees its GPUs Unknown (a pool of 0 GPUs, with one node):
    serving nothing there is no verdict on the spec, which would be stored by its hash and outlast the change."""
    short = Infeasible(reason="the pool cannot serve all demand of shop/a", diagnosis=["shop/a: 0 of 50 requests/s"])
    reason, why = alone_verdict(short, "shop/a", settling=[])
    assert reason == st.SLO_UNREACHABLE and "0 of 50 requests/s" in why
    assert alone_verdict(short, "shop/a", settling=["gpu-a"]) is None
    refused = InvalidInput(reason="tasks[0].variants[0].profiles: no profile for 1g.10gb", system="shop/a")
    assert alone_verdict(refused, "shop/a", settling=["gpu-a"]) == (st.INVALID_SPEC, refused.reason)
