"""AdapterPools' decisions without a cluster (operator/reconcile/adapter_pool_decide.py): GPUs, servers, status.

The placement is the real one (`tessera place`'s predictors) on the example
pool; GPU pools are the conftest's plain node objects.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tessera.operator import naming
from tessera.operator.api import status as st
from tessera.operator.api.adapter_pools import read_adapter_pool
from tessera.operator.api.v1alpha1 import AdapterPoolStatus, RouteNames, child_name
from tessera.operator.gpus.node_plans import Placement as NodePlacement, NodePlan
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild, PatchStatus, PostEvent
from tessera.operator.reconcile.adapter_pool_decide import (GPU_ANNOTATION, PoolServers, ServerLoad,
                                                            assign_adapter_pools, placing_order,
                                                            choose_slots, compound_gpus, compound_holders,
                                                            decide_pool_status, decide_servers, gpus_allowed,
                                                            higher_holders, mig_off_for_servers, outranking,
                                                            placed_compound_gpus,
                                                            planned_servers, pool_status, reserved_for, server_slots,
                                                            within, yields_to_compound)
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.builders import disruption_budget
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.reconcile.adapter_routes import route_summaries
from tessera.operator.reconcile.decide import STATE_FORMAT, NodeMig
from tessera.operator.reconcile.quotas import WholeGpuQuota
from tessera.operator.settings import OperatorSettings
from tessera.operator.fetcher import FetcherClient
from tessera.operator.vllm import VllmClient
from tessera.planner.placement import place

from .conftest import gpu_node, pool_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools" / "support-assistants.yaml"
SETTINGS = OperatorSettings()
NOW = "2026-12-03T11:00:00Z"


def pool_object(status: dict | None = None, **spec_changes) -> dict:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"] = {"name": "support", "namespace": "shop", "uid": "uid-ap", "generation": 2}
    document["spec"].update(spec_changes)
    document["status"] = status or {}
    return document


def adapter_pool(status: dict | None = None, **spec_changes):
    return read_adapter_pool(pool_object(status, **spec_changes))


def gpu_pool(nodes: int = 2, gpus: int = 2):
    return pool_of(*[gpu_node(f"gpu-{chr(ord('a') + i)}", gpus=gpus) for i in range(nodes)])


def decided(obj, pool, busy=frozenset(), held=None, taken=frozenset()) -> PoolServers:
    free = len(pool.slots()) - len(taken)
    placement = place(within(obj.problem, free), "tessera")
    return PoolServers(obj, placement, choose_slots(pool, [s.index for s in placement.servers], held or {}, set(taken), set(busy)),
                       free=free)


def live(body: dict, available: bool = True) -> dict:
    ready = {"observedGeneration": 1, "availableReplicas": 1, "updatedReplicas": 1} if available else {}
    return {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}", "generation": 1},
            "status": ready}


def servers_of(obj, pool, **kwargs):
    servers = decided(obj, pool, **kwargs)
    return servers, planned_servers(pool, servers, SETTINGS, set(), {})


# -- which GPU pool, which GPUs ---------------------------------------------------

def test_an_adapter_pool_goes_to_the_gpu_pool_of_its_product():
    h100 = gpu_pool()
    members = assign_adapter_pools([adapter_pool(), adapter_pool(gpuProduct="A100-80GB")], [h100], [])
    assert [o.spec.gpu for o in members[h100.key]] == ["H100-80GB"]
    assert [o.spec.gpu for o in members[None]] == ["A100-80GB"]


def test_a_pool_whose_spec_names_no_product_stays_with_the_gpus_its_running_servers_hold():
    pool = gpu_pool()
    _, planned = servers_of(adapter_pool(), pool)
    broken = read_adapter_pool({**pool_object(), "spec": {**pool_object()["spec"], "gpuProduct": "no-such-gpu"}})
    assert broken.spec is None
    assert assign_adapter_pools([broken], [pool], [live(b) for b, _ in planned]) == {pool.key: [broken]}
    assert assign_adapter_pools([broken], [pool], []) == {None: [broken]}


def test_new_servers_take_whole_gpus_no_compound_plan_holds_from_the_pools_last_gpu_backwards():
    pool = gpu_pool(nodes=2, gpus=2)
    assert choose_slots(pool, range(3), {}, set(), busy={("gpu-b", 1)}) == [("gpu-b", 0), ("gpu-a", 1), ("gpu-a", 0)]
    assert choose_slots(pool, range(4), {}, set(), busy={("gpu-b", 1)})[-1] == ("gpu-b", 1)  # busy ones only when needed


def test_a_running_server_keeps_its_gpu_unless_another_adapter_pool_holds_it():
    pool = gpu_pool(nodes=2, gpus=2)
    assert choose_slots(pool, range(2), {1: ("gpu-a", 0)}, set(), set()) == [("gpu-b", 1), ("gpu-a", 0)]
    assert choose_slots(pool, range(2), {1: ("gpu-a", 0)}, {("gpu-a", 0)}, set()) == [("gpu-b", 1), ("gpu-b", 0)]


def test_adapter_pools_take_free_gpus_invalid_ones_first_then_by_priority_highest_first_then_by_name():
    def named(name: str, **spec):
        document = pool_object(**spec)
        document["metadata"]["name"] = name
        return read_adapter_pool(document)
    low, high, plain = named("a-low", poolPriority=-5), named("z-high", poolPriority=5), named("m-plain")
    broken = dataclasses.replace(named("b-broken", poolPriority=9), problem=None, error="a spec the placement refuses")
    assert [o.ref.name for o in placing_order([low, plain, high, broken])] == ["b-broken", "z-high", "m-plain", "a-low"]


def test_a_servers_gpu_is_read_back_from_its_deployment():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    other = {**planned[0][0], "metadata": {**planned[0][0]["metadata"], "ownerReferences": [
        {"kind": "AdapterPool", "controller": True, "uid": "uid-other", "name": "other"}]}}
    assert server_slots([live(body) for body, _ in planned], obj.ref) == dict(enumerate(servers.slots))
    assert server_slots([live(other)], obj.ref) == {}


def test_the_placement_gets_no_more_servers_than_gpus_free_for_it():
    obj = adapter_pool(limits={"maxServers": 4, "maxLoraSlotsPerServer": 4})
    assert within(obj.problem, 1).limits.max_servers == 1
    placement = place(within(obj.problem, 1), "tessera")
    assert len(placement.servers) == 1 and placement.unplaced


def test_the_compound_plans_gpus_are_read_from_the_stored_plan_and_kept_shares():
    share = {"tasks": [], "gpus": [{"node": "gpu-a", "gpu": 1, "layout": [], "instances": []}]}
    assert compound_gpus({"kept": json.dumps({"shop/x": share})}) == {("gpu-a", 1)}
    assert compound_gpus({}) == set()


# -- the servers -------------------------------------------------------------------

def test_each_server_is_a_vllm_deployment_with_the_placements_flags_on_one_whole_gpu_of_its_node():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    body, now = planned[0]
    server, (node, gpu) = servers.placement.servers[0], servers.slots[0]
    container = body["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert now
    assert body["metadata"]["name"] == child_name("support", "server", "0")
    assert body["metadata"]["ownerReferences"][0] | {"kind": "AdapterPool", "uid": "uid-ap", "controller": True} \
        == body["metadata"]["ownerReferences"][0]
    assert body["metadata"]["labels"][naming.POOL_LABEL] == "support"
    assert naming.SYSTEM_LABEL not in body["spec"]["template"]["metadata"]["labels"]
    assert container["image"] == "vllm/vllm-openai:v0.8.5"
    assert "--enable-lora" in args
    flags = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--max")}
    assert flags == {"--max-loras": str(server.max_loras), "--max-lora-rank": str(server.max_lora_rank),
                     "--max-cpu-loras": str(max(len(server.adapters), server.max_loras)),
                     "--max-model-len": "32768"}
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in container["env"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    terms = body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [node]
    assert body["metadata"]["annotations"][GPU_ANNOTATION] == f"{node}/{gpu}"


def test_tesseras_flags_come_after_the_users_args_so_vllm_takes_them():
    base = {**pool_object()["spec"]["baseModel"], "args": ["--max-loras", "99", "--seed", "3"],
            "env": [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "False"}]}
    _, planned = servers_of(adapter_pool(baseModel=base), gpu_pool())
    container = planned[0][0]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[:4] == ["--max-loras", "99", "--seed", "3"]
    assert len(args) - 1 - args[::-1].index("--max-loras") > 1  # the last --max-loras is tessera's
    assert [e for e in container["env"] if e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == [
        {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}]


def test_a_server_waits_while_the_compound_plan_in_force_holds_its_gpu():
    obj, pool = adapter_pool(), gpu_pool()
    servers = decided(obj, pool)
    compound = placed_compound_gpus(NodePlacement({servers.slots[0][0]: NodePlan(
        servers.slots[0][0], 2, {servers.slots[0][1]: (("7g.80gb", 1),)})}, {}, {}))
    planned = planned_servers(pool, servers, SETTINGS, compound, {})
    assert [now for _, now in planned] == [False] + [True] * (len(planned) - 1)
    assert all(not isinstance(a, ApplyChild) or a.body is not planned[0][0]
               for a in decide_servers(planned, [], True))


def test_a_server_waits_while_its_node_waits_for_a_mig_layout():
    obj, pool = adapter_pool(), gpu_pool()
    servers = decided(obj, pool)
    pending = {servers.slots[0][0]: NodeMig("tessera-v1-x", [], {}, servers.slots[0][0], applied=False)}
    assert not planned_servers(pool, servers, SETTINGS, set(), pending)[0][1]


def test_a_server_waits_while_the_pools_first_compound_plan_is_solved():
    obj, pool = adapter_pool(), gpu_pool()
    servers = decided(obj, pool)
    planned = planned_servers(pool, servers, SETTINGS, set(), {}, first_plan_solving=True)
    assert planned and not any(now for _, now in planned)
    assert decide_servers(planned, [], True) == []


def with_budgets(planned) -> list[dict]:
    """The planned servers live, each with its PodDisruptionBudget."""
    return [live(child) for body, _ in planned for child in (body, disruption_budget(body))]


def test_an_unchanged_cluster_gets_no_write_of_a_server():
    obj, pool = adapter_pool(), gpu_pool()
    _, planned = servers_of(obj, pool)
    assert {type(a) for a in decide_servers(planned, [], True)} == {ApplyChild}
    assert decide_servers(planned, with_budgets(planned), True) == []


def test_each_server_gets_its_disruption_budget_applied_with_it_and_none_while_it_waits():
    obj, pool = adapter_pool(), gpu_pool()
    _, planned = servers_of(obj, pool)
    applied = [a.body for a in decide_servers(planned, [], True)]
    assert applied == [child for body, _ in planned for child in (body, disruption_budget(body))]
    budget = applied[1]
    assert budget["kind"] == "PodDisruptionBudget" and budget["metadata"]["name"] == planned[0][0]["metadata"]["name"]
    assert budget["spec"]["selector"] == planned[0][0]["spec"]["selector"]
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "AdapterPool"
    waiting = [(body, False) for body, _ in planned]
    assert decide_servers(waiting, [], True) == []


def test_a_server_no_placement_wants_is_deleted_then_its_budget_but_an_invalid_pools_servers_stay():
    obj, pool = adapter_pool(), gpu_pool()
    _, planned = servers_of(obj, pool)
    body = {**planned[0][0], "metadata": {**planned[0][0]["metadata"], "name": "support-server-9"}}
    stale = [live(body), live(disruption_budget(body))]
    actions = decide_servers(planned, with_budgets(planned) + stale, True)
    assert [(type(a), a.child["kind"], a.child["metadata"]["name"]) for a in actions] == [
        (DeleteChild, "Deployment", "support-server-9"), (DeleteChild, "PodDisruptionBudget", "support-server-9")]
    assert decide_servers([], stale, valid=False) == []


def test_under_a_quota_an_adapter_pools_change_asks_for_no_more_servers_than_its_placement_and_keeps_none_for_another():
    """Why AdapterPool servers take no quota step (quota_transitions.py): each is one replica with the Recreate
    strategy, so a changed server's pod goes before its new one is created, and a server no placement wants is
    deleted in the reconcile that applies the new ones, never kept serving until they are available. What the
    namespace asks for after a reconcile is the placement's servers, which its quota caps (gpus_allowed): no new
    pod waits for an old one that waits for it."""
    obj, pool = adapter_pool(), gpu_pool()
    limit, _ = gpus_allowed(len(pool.slots()), WholeGpuQuota(1, "ResourceQuota shop/gpus: requests.nvidia.com/gpu 1"))
    placement = place(within(obj.problem, limit), "tessera")
    slots = choose_slots(pool, [s.index for s in placement.servers], {}, set(), set())
    planned = planned_servers(pool, PoolServers(obj, placement, slots, free=limit), SETTINGS, set(), {})
    old = {**planned[0][0], "metadata": {**planned[0][0]["metadata"], "name": "support-server-9"}}
    actions = decide_servers(planned, [live(old)], True)
    applied = [a.body for a in actions if isinstance(a, ApplyChild) and a.kind == "Deployment"]
    assert [a.child["metadata"]["name"] for a in actions if isinstance(a, DeleteChild)] == ["support-server-9"]
    assert all(b["spec"]["strategy"] == {"type": "Recreate"} for b in applied)
    assert sum(b["spec"]["replicas"] for b in applied) == len(planned) == limit == 1


# -- status ------------------------------------------------------------------------

def test_a_pool_with_every_adapter_placed_and_its_servers_available_is_ready():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    phase, conditions, summary = pool_status(obj, servers, planned, [live(b) for b, _ in planned])
    by_type = {c.type: c for c in conditions}
    assert phase == st.PHASE_READY
    assert by_type[st.READY].status and by_type[st.ADAPTERS_PLACED].status and not by_type[st.DEGRADED].status
    assert summary["adaptersPlaced"] == 8 and summary["serversReady"] == summary["gpus"] == len(planned)
    assert AdapterPoolStatus.model_validate({"plan": summary}).plan.servers[0].ready


def test_servers_not_yet_available_keep_the_pool_deploying():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    phase, conditions, summary = pool_status(obj, servers, planned, [live(b, available=False) for b, _ in planned])
    assert phase == st.PHASE_DEPLOYING and summary["serversReady"] == 0
    assert next(c for c in conditions if c.type == st.READY).reason == st.SERVERS_STARTING


def test_a_pool_the_gpus_cannot_hold_is_degraded_and_says_how_much_it_serves():
    obj = adapter_pool(limits={"maxServers": 4, "maxLoraSlotsPerServer": 4})
    pool = gpu_pool(nodes=1, gpus=1)
    servers, planned = servers_of(obj, pool)
    phase, conditions, summary = pool_status(obj, servers, planned, [live(b) for b, _ in planned])
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    placed = next(c for c in conditions if c.type == st.ADAPTERS_PLACED)
    assert phase == st.PHASE_DEGRADED and degraded.status and not placed.status
    assert summary["adaptersUnplaced"] == 8 - summary["adaptersPlaced"] > 0
    share = summary["placedRequestsPerSecond"] / summary["requestsPerSecond"]
    assert f"carry {share:.0%} of its expected rate" in degraded.message and "1 GPU(s) free" in degraded.message


def test_a_pool_whose_adapters_failed_to_load_is_degraded_naming_them_with_the_engines_error_and_a_warning():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    first = planned[0][0]["metadata"]["name"]
    loads = {("shop", first): ServerLoad(3, {"code-review": "No adapter found for /adapters/code-review"})}
    phase, conditions, summary = pool_status(obj, servers, planned, [live(b) for b, _ in planned], loads)
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert phase == st.PHASE_DEGRADED and degraded.status and degraded.reason == st.ADAPTER_LOAD_FAILED
    assert f"code-review on {first}: No adapter found for /adapters/code-review" in degraded.message
    assert next(c for c in conditions if c.type == st.READY).status  # the other adapters serve
    new = st.build_status(obj.ref.generation, phase, conditions, summary, obj.status, NOW)
    events = [a.body for a in decide_pool_status(obj, new, NOW) if isinstance(a, PostEvent)]
    assert any(e["type"] == "Warning" and e["reason"] == st.ADAPTER_LOAD_FAILED for e in events)


def test_each_servers_loaded_and_failed_adapters_are_counted_in_the_plan():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    first = planned[0][0]["metadata"]["name"]
    loads = {("shop", first): ServerLoad(2, {"code-review": "refused", "sql-writer": "refused"})}
    _, _, summary = pool_status(obj, servers, planned, [live(b) for b, _ in planned], loads)
    assert (summary["servers"][0]["adaptersLoaded"], summary["servers"][0]["adaptersFailed"]) == (2, 2)
    assert summary["adaptersFailed"] == 2
    assert all("adaptersLoaded" not in server for server in summary["servers"][1:])  # no pod answered yet


def test_the_degraded_message_names_a_few_failed_adapters_and_counts_the_rest():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    first = planned[0][0]["metadata"]["name"]
    loads = {("shop", first): ServerLoad(0, {f"adapter-{i:04d}": "e" * 200 for i in range(2000)})}
    _, conditions, _ = pool_status(obj, servers, planned, [live(b) for b, _ in planned], loads)
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert "2000 adapter load(s) failed" in degraded.message and "and 1997 more" in degraded.message
    assert len(degraded.message) < 1_000


def test_a_spec_the_placement_refuses_is_invalid_with_its_field_and_a_warning_event():
    obj = adapter_pool(meanPromptTokens=5000)
    assert not obj.valid
    phase, conditions, summary = pool_status(obj, None, [], [])
    invalid = next(c for c in conditions if c.type == st.INVALID)
    assert phase == st.PHASE_INVALID and invalid.status and summary is None
    assert invalid.message.startswith("spec.meanPromptTokens:")
    new = st.build_status(obj.ref.generation, phase, conditions, summary, obj.status, NOW)
    actions = decide_pool_status(obj, new, NOW)
    assert isinstance(actions[0], PatchStatus) and actions[0].plural == "adapterpools"
    events = [a.body for a in actions if isinstance(a, PostEvent)]
    assert any(e["type"] == "Warning" and e["reason"] == st.INVALID_SPEC
               and e["involvedObject"]["kind"] == "AdapterPool" for e in events)


def test_a_pool_of_a_product_no_nodes_have_is_pending():
    obj = adapter_pool(gpuProduct="A100-80GB")
    phase, conditions, _ = pool_status(obj, None, [], [])
    assert phase == st.PHASE_PENDING and next(c for c in conditions if c.type == st.READY).reason == st.NO_GPU_POOL


def test_an_unchanged_status_is_not_written_again():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    verdict = pool_status(obj, servers, planned, [live(b) for b, _ in planned])
    first = st.build_status(obj.ref.generation, *verdict, obj.status, NOW)
    again = adapter_pool(status=first)
    assert decide_pool_status(again, st.build_status(2, *verdict, again.status, "2026-12-03T12:00:00Z"), NOW) == []


def test_a_pool_with_an_adapter_that_got_no_route_is_degraded_naming_it_with_a_warning():
    obj, pool = adapter_pool(), gpu_pool()
    servers, planned = servers_of(obj, pool)
    routes = RouteNames(pattern="support-{adapter}", unrouted=1, unrouted_examples=["code-review"])
    phase, conditions, summary = pool_status(obj, servers, planned, [live(b) for b, _ in planned], {}, routes)
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert phase == st.PHASE_DEGRADED and degraded.reason == st.ROUTE_NAME_TAKEN and "code-review" in degraded.message
    assert summary["routes"]["adaptersUnrouted"] == 1
    new = st.build_status(obj.ref.generation, phase, conditions, summary, obj.status, NOW)
    events = [a.body for a in decide_pool_status(obj, new, NOW) if isinstance(a, PostEvent)]
    assert any(e["type"] == "Warning" and e["reason"] == st.ROUTE_NAME_TAKEN for e in events)


@pytest.mark.parametrize("adapters", [2000])
def test_the_status_of_2000_adapters_holds_counts_and_a_bounded_list(adapters):
    spec = pool_object()["spec"]
    many = [{**spec["adapters"][i % 8], "name": f"adapter-{i:04d}"} for i in range(adapters)]
    obj = adapter_pool(adapters=many)
    servers, planned = servers_of(obj, gpu_pool(nodes=1, gpus=2))
    taken = [{"kind": "Service", "metadata": {"name": f"support-{a['name']}", "namespace": "shop", "uid": "u"}}
                  for a in many]  # every readable name taken: every route is an exception, and listed within bounds
    routes = route_summaries([servers], taken)[("shop", obj.ref.name)]
    _, _, summary = pool_status(obj, servers, planned, [], None, routes)
    assert summary["routes"]["serviceExceptionsCount"] == adapters and len(summary["routes"]["serviceExceptions"]) <= 32
    assert summary["adaptersPlaced"] + summary["adaptersUnplaced"] == adapters
    assert len(summary["unplacedAdapterExamples"]) <= 16 and len(summary["servers"]) <= 2
    assert len(json.dumps(summary)) < 4_000


# -- quotas on whole GPUs -----------------------------------------------------------

QUOTA = WholeGpuQuota(1, "ResourceQuota shop/gpus: requests.nvidia.com/gpu 1")


def named_pool(name: str):
    document = pool_object(limits={"maxServers": 4, "maxLoraSlotsPerServer": 4})
    document["metadata"].update(name=name, uid=f"uid-{name}")
    return read_adapter_pool(document)


def test_a_quota_on_whole_gpus_tighter_than_the_free_gpus_caps_the_servers():
    assert gpus_allowed(4, QUOTA) == (1, QUOTA)
    assert gpus_allowed(1, WholeGpuQuota(3, "wide")) == (1, None)
    assert gpus_allowed(4, None) == (4, None)


def test_the_adapter_pools_of_a_namespace_share_its_quota_on_whole_gpus():
    pools = AdapterPools(Actor(None, VllmClient(2), FetcherClient(2)), SETTINGS)  # type: ignore[arg-type]  # plans only, acts never
    quotas = {"shop": WholeGpuQuota(2, "ResourceQuota shop/gpus: requests.nvidia.com/gpu 2")}
    first, second = pools.plan(gpu_pool(nodes=2, gpus=2), [named_pool("a"), named_pool("b")], [], {}, quotas)
    assert (len(first.placement.servers), len(second.placement.servers)) == (2, 0)
    assert second.quota is not None and second.quota.limit == 0 and quotas["shop"].limit == 0


def test_a_pool_its_quota_holds_below_its_adapters_is_degraded_quota_reached_naming_the_quota():
    obj, pool = named_pool("support"), gpu_pool(nodes=2, gpus=2)
    placement = place(within(obj.problem, 1), "tessera")
    servers = PoolServers(obj, placement, choose_slots(pool, [0], {}, set(), set()), free=4, quota=QUOTA)
    planned = planned_servers(pool, servers, SETTINGS, set(), {})
    phase, conditions, _ = pool_status(obj, servers, planned, [live(b) for b, _ in planned])
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert phase == st.PHASE_DEGRADED and degraded.reason == st.QUOTA_REACHED
    assert f"{QUOTA.source} leaves tessera 1 of the 4 GPU(s) free for the pool" in degraded.message
    assert next(c for c in conditions if c.type == st.ADAPTERS_PLACED).reason == st.QUOTA_REACHED


def test_a_pool_the_free_gpus_hold_below_its_quota_reads_insufficient_capacity():
    obj, pool = named_pool("support"), gpu_pool(nodes=1, gpus=1)
    servers, planned = servers_of(obj, pool)
    phase, conditions, _ = pool_status(obj, servers, planned, [live(b) for b, _ in planned])
    assert next(c for c in conditions if c.type == st.DEGRADED).reason == st.INSUFFICIENT_CAPACITY


# -- one priority order over AdapterPools and compound systems (issue 29 item 1, issue 30 item 7) ----------------

def held_for(*pairs: tuple[str, str, int]) -> dict[str, str]:
    """A pool's stored state whose kept shares hold GPUs: (system, node, GPU index)."""
    shares: dict[str, dict] = {}
    for system, node, gpu in pairs:
        shares.setdefault(system, {"tasks": [], "gpus": []})["gpus"].append(
            {"node": node, "gpu": gpu, "layout": [], "instances": []})
    return {"kept": json.dumps(shares)}


def test_the_compound_plans_gpus_name_the_systems_that_hold_them(plan):
    state = {"plan": plan.model_dump_json(), "format": str(STATE_FORMAT), **held_for(("shop/x", "gpu-a", 1))}
    assert compound_holders(state) == {("gpu-a", 3): {"shop/traffic"}, ("gpu-b", 0): {"shop/traffic"},
                                       ("gpu-a", 1): {"shop/x"}}


def test_an_adapter_pool_never_takes_a_gpu_held_for_a_compound_system_of_its_priority_or_higher():
    holders = {("gpu-a", 0): {"t/high"}, ("gpu-a", 1): {"t/equal"}, ("gpu-b", 0): {"t/low"}, ("gpu-b", 1): {"t/gone"}}
    priorities = {"t/high": 10, "t/equal": 5, "t/low": 0}
    assert outranking(holders, priorities, 5) == {("gpu-a", 0): {"t/high"}, ("gpu-a", 1): {"t/equal"}}
    # held only by a lower priority, or by a system no longer planned: claimable
    assert outranking(holders, priorities, 11) == {}
    assert higher_holders(outranking(holders, priorities, 5), priorities, 5) == {"t/high": (10, 1)}


def test_an_adapter_pool_lends_its_gpus_to_the_compound_solve_where_a_compound_system_outranks_it():
    assert yields_to_compound(0, [5, 10])
    assert yields_to_compound(0, [-1, 10])  # a mixed pool: lent only above 0, so the one of -1 never gets them
    assert not yields_to_compound(5, [5, 3])  # none outranks it: what runs keeps them
    assert not yields_to_compound(0, [])


def planning(pool, objects, state, priorities, live_children=()):
    pools = AdapterPools(Actor(None, VllmClient(2), FetcherClient(2)), SETTINGS)  # type: ignore[arg-type]  # plans only, acts never
    return pools.plan(pool, objects, list(live_children), state, {}, priorities)


def test_gpus_a_higher_priority_compound_system_holds_are_not_free_for_a_lower_priority_adapter_pool():
    pool = gpu_pool(nodes=2, gpus=1)
    (decided,) = planning(pool, [named_pool("support")], held_for(("t/high", "gpu-a", 0)), {"t/high": 10})
    assert decided.free == 1 and decided.slots == [("gpu-b", 0)]
    assert decided.outranked_by == {"t/high": (10, 1)} and decided.yields


def test_a_running_server_whose_gpu_a_higher_priority_compound_plan_took_moves_off_it():
    pool = gpu_pool(nodes=2, gpus=1)
    (before,) = planning(pool, [named_pool("support")], {}, {})
    body = planned_servers(pool, before, SETTINGS, set(), {})[0][0]
    gpu = before.slots[0]
    (after,) = planning(pool, [named_pool("support")], held_for(("t/high", *gpu)), {"t/high": 10}, [live(body)])
    assert gpu not in after.slots and after.slots


def test_a_higher_priority_adapter_pool_claims_gpus_a_lower_priority_compound_system_holds_and_reserves_them():
    pool = gpu_pool(nodes=1, gpus=2)
    high = read_adapter_pool({**pool_object(poolPriority=20, limits={"maxServers": 4, "maxLoraSlotsPerServer": 4})})
    (decided,) = planning(pool, [high], held_for(("t/low", "gpu-a", 0), ("t/low", "gpu-a", 1)), {"t/low": 10})
    assert decided.free == 2 and set(decided.slots) == {("gpu-a", 0), ("gpu-a", 1)} and not decided.outranked_by
    assert not decided.yields and AdapterPools.reserved([decided], []) == {("gpu-a", 0): None, ("gpu-a", 1): None}
    # its servers wait while the compound plan in force still holds their GPUs
    assert [now for _, now in planned_servers(pool, decided, SETTINGS, set(decided.slots), {})] == [False, False]


def test_at_equal_priority_what_already_runs_keeps_its_gpus():
    pool = gpu_pool(nodes=1, gpus=2)
    (decided,) = planning(pool, [named_pool("support")], held_for(("t/same", "gpu-a", 0)), {"t/same": 0})
    assert ("gpu-a", 0) not in decided.slots and decided.free == 1 and not decided.yields
    assert decided.outranked_by == {}  # not a higher priority: not named as one


def test_an_outranked_adapter_pools_gpus_and_its_live_servers_are_lent_to_the_systems_above_its_priority():
    pool = gpu_pool(nodes=2, gpus=1)
    low, equal = named_pool("low"), named_pool("equal")
    (decided,) = planning(pool, [low], {}, {"t/high": 10})
    body = planned_servers(pool, decided, SETTINGS, set(), {})[0][0]
    moved = {**body, "metadata": {**body["metadata"], "annotations": {
        **body["metadata"]["annotations"], GPU_ANNOTATION: "gpu-z/0"}}}  # its live server still on another GPU
    assert decided.yields and AdapterPools.reserved([decided], [live(moved)]) == {
        **dict.fromkeys(decided.slots, 0), ("gpu-z", 0): 0}
    (kept,) = planning(pool, [equal], {}, {"t/same": 0})
    assert not kept.yields and AdapterPools.reserved([kept], []) == dict.fromkeys(kept.slots)


def test_a_gpu_two_adapter_pools_name_is_reserved_where_one_keeps_it():
    """A lent pool's live server still on a GPU a pool none outranks now plans on (a server moving)."""
    pool = gpu_pool(nodes=2, gpus=1)
    high = read_adapter_pool(pool_object(poolPriority=20))
    (kept,) = planning(pool, [high], {}, {"t/mid": 10})
    (lent,) = planning(pool, [named_pool("low")], {}, {"t/mid": 10})
    body = planned_servers(pool, lent, SETTINGS, set(), {})[0][0]
    node, gpu = kept.slots[0]
    on_kept = {**body, "metadata": {**body["metadata"], "annotations": {
        **body["metadata"]["annotations"], GPU_ANNOTATION: f"{node}/{gpu}"}}}
    assert AdapterPools.reserved([kept, lent], [live(on_kept)])[(node, gpu)] is None
    assert AdapterPools.reserved([lent, kept], [live(on_kept)])[(node, gpu)] is None  # in either order


def test_in_a_mixed_pool_an_adapter_pools_gpus_are_lent_only_above_its_priority():
    """Compound systems both above and at or below it: lent above its priority (the planner keeps the lower one off
    them: tests/planner/test_lent_gpus.py), not reserved against all."""
    pool = gpu_pool(nodes=2, gpus=1)
    (decided,) = planning(pool, [named_pool("support")], {}, {"t/high": 10, "t/low": -1, "t/same": 0})
    assert decided.yields and AdapterPools.reserved([decided], []) == dict.fromkeys(decided.slots, 0)
    assert reserved_for([decided]) == {decided.pool.ref.key: (0, len(decided.slots))}  # named by t/low, t/same


def test_an_adapter_pool_a_higher_priority_compound_system_holds_below_its_adapters_is_degraded_naming_it():
    obj, pool = named_pool("support"), gpu_pool(nodes=2, gpus=1)
    (decided,) = planning(pool, [obj], held_for(("t/high", "gpu-a", 0)), {"t/high": 10})
    planned = planned_servers(pool, decided, SETTINGS, set(), {})
    phase, conditions, summary = pool_status(obj, decided, planned, [live(b) for b, _ in planned])
    degraded = next(c for c in conditions if c.type == st.DEGRADED)
    assert phase == st.PHASE_DEGRADED and degraded.reason == st.PREEMPTED_BY_PRIORITY
    assert "t/high (poolPriority 10, 1 GPU(s))" in degraded.message
    assert "higher spec.poolPriority than its 0" in degraded.message
    assert f"({summary['placedRequestsPerSecond']:g} of {summary['requestsPerSecond']:g} requests/s)" in degraded.message
    assert next(c for c in conditions if c.type == st.ADAPTERS_PLACED).reason == st.PREEMPTED_BY_PRIORITY


def test_the_compound_status_learns_each_adapter_pools_priority_and_gpus_reserved_or_lent():
    """Lent ones too: the systems at or below its priority do not get them (decide.py names it only to those)."""
    pool = gpu_pool(nodes=2, gpus=1)
    high = read_adapter_pool(pool_object(poolPriority=20))
    (kept,) = planning(pool, [high], {}, {"t/low": 0})
    (lent,) = planning(pool, [named_pool("low")], {}, {"t/high": 10})
    assert reserved_for([kept, lent]) == {high.ref.key: (20, len(kept.gpus)), lent.pool.ref.key: (0, len(lent.gpus))}
    assert kept.gpus and lent.gpus


PARTITIONED = {"nvidia.com/mig.config": "tessera-v1-abc", "nvidia.com/mig.config.state": "success",
               "nvidia.com/mig-1g.10gb.count": "7"}


def test_a_claimed_gpu_a_compound_plan_left_partitioned_gets_mig_off_for_its_server():
    pool = pool_of(gpu_node("gpu-a", gpus=1), gpu_node("gpu-b", gpus=1, extra_labels=PARTITIONED))
    (decided,) = planning(pool, [named_pool("support")], {}, {})
    assert {node for node, _ in decided.slots} == {"gpu-a", "gpu-b"}
    (node,) = mig_off_for_servers(pool, [decided], NodePlacement({}, {}, {})).items()
    assert node[0] == "gpu-b" and node[1].entries == [{"devices": [0], "mig-enabled": False}]
    # the compound plan in force still lays the node out: the server waits for it (no relabel of its own)
    laid_out = NodePlacement({"gpu-b": NodePlan("gpu-b", 1, {0: (("1g.10gb", 7),)})}, {}, {})
    assert mig_off_for_servers(pool, [decided], laid_out) == {}
    # an invalid pool's kept servers change nothing
    assert mig_off_for_servers(pool, [dataclasses.replace(decided, pool=dataclasses.replace(
        decided.pool, problem=None, error="broken"))], NodePlacement({}, {}, {})) == {}
