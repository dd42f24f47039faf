"""AdapterPools re-placed against the placement in force (operator/reconcile/adapter_pool_decide.py).

Each test applies a pool as a reconcile would (AdapterPools.plan, the real
placement), takes the Deployments and the placement ConfigMap it writes as
the live ones (what the API server would return), edits the spec, and
reconciles again: the previous placement is read back from those objects
only, never from the first reconcile's memory (a new AdapterPools each
time, as after a restart).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tessera.operator.api import status as st
from tessera.operator.api.adapter_pools import read_adapter_pool
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.actions import ApplyChild, DeleteChild, PostEvent
from tessera.operator.reconcile.adapter_loading import placed_adapters
from tessera.operator.reconcile.adapter_pool_decide import (PLACEMENT_KEY, REPLACEMENT_SLACK, PoolServers,
                                                            choose_placement, decide_placement_record, matched_to,
                                                            decide_pool_status, decide_servers, moves_between,
                                                            placement_record, planned_servers, pool_status,
                                                            previous_placement, running_servers, within)
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.settings import OperatorSettings
from tessera.operator.fetcher import FetcherClient
from tessera.operator.vllm import VllmClient
from tessera.planner.placement import Placement, ServerPlacement, place
from tessera.planner.placement.scenarios import Scenario, draw_adapters

from .conftest import gpu_node, pool_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adapter-pools" / "support-bots.yaml"
SETTINGS = OperatorSettings()
GPUS = pool_of(gpu_node("gpu-a", gpus=8), gpu_node("gpu-b", gpus=8))
NOW = "2026-12-04T11:00:00Z"
MOST_MOVED_SHARE = 0.05
"""Of the adapters, the most a 10% rate change moves (docs/adapter-placement.md states it for replace_adapters)."""


def adapter_entry(name: str, rank: int, rate: float) -> dict:
    return {"name": name, "rank": rank, "expectedRequestsPerSecond": round(rate, 6),
            "weights": {"uri": f"s3://adapters/{name}", "digest": "sha256:" + "0" * 64}}


def pool_document(adapters: list[dict], generation: int = 1, status: dict | None = None) -> dict:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"] = {"name": "bots", "namespace": "shop", "uid": "uid-bots", "generation": generation}
    document["spec"]["limits"] = {"maxServers": 16}
    document["spec"]["adapters"] = adapters
    document["status"] = status or {}
    return document


def scenario_adapters(count: int = 200, rate: float = 60.0) -> list[dict]:
    """`count` Zipf-rated adapters of the benchmark scenarios' ranks, on Qwen (the example pool's model)."""
    return [adapter_entry(a.name, a.rank, a.rate_rps) for a in draw_adapters(Scenario(count, rate, "qwen"))]


def reconcile(document: dict, live: list[dict]) -> tuple[PoolServers, list[tuple[dict, bool]], list[dict]]:
    """One reconcile of the pool by a fresh operator process: its servers, their Deployments as planned, and the
    pool's children as the API server returns them once it applied what the reconcile wrote."""
    pools = AdapterPools(Actor(None, VllmClient(2), FetcherClient(2)), SETTINGS)  # type: ignore[arg-type]  # plans only, acts never
    (decided,) = pools.plan(GPUS, [read_adapter_pool(document)], live, {}, {})
    planned = planned_servers(GPUS, decided, SETTINGS, set(), {})
    written = [a.body for a in decide_placement_record(decided, live) + decide_servers(planned, live, True)
               if isinstance(a, ApplyChild)]
    deleted = {(a.child["kind"], a.child["metadata"]["name"]) for a in decide_servers(planned, live, True)
               if isinstance(a, DeleteChild)}
    names = {(b["kind"], b["metadata"]["name"]) for b in written} | deleted
    return decided, planned, [c for c in live if (c["kind"], c["metadata"]["name"]) not in names] + as_live(written)


def as_live(bodies: list[dict]) -> list[dict]:
    """Written children as the API server returns them once applied."""
    return [{**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}", "generation": 1},
             **({"status": {"observedGeneration": 1, "availableReplicas": 1, "updatedReplicas": 1}}
                if body["kind"] == "Deployment" else {})}
            for body in bodies]


def as_written(child: dict) -> dict:
    """A live Deployment less what the API server added (as_live)."""
    metadata = {k: v for k, v in child["metadata"].items() if k not in ("uid", "generation")}
    return {**{k: v for k, v in child.items() if k != "status"}, "metadata": metadata}


def applied(adapters: list[dict]) -> tuple[PoolServers, list[dict]]:
    decided, _, live = reconcile(pool_document(adapters), [])
    return decided, live


def with_rates_up(adapters: list[dict], share: float, factor: float) -> list[dict]:
    """Every 1/share-th adapter's rate times factor."""
    step = round(1 / share)
    return [{**a, "expectedRequestsPerSecond": round(a["expectedRequestsPerSecond"] * factor, 6)} if i % step == 0
            else a for i, a in enumerate(adapters)]


def planned_first_name(decided: PoolServers) -> str:
    assert decided.placement is not None
    return planned_servers(GPUS, decided, SETTINGS, set(), {})[0][0]["metadata"]["name"]


def by_name(bodies) -> dict[str, dict]:
    return {b["metadata"]["name"]: b for b in bodies if b["kind"] == "Deployment"}


def test_a_10_percent_rate_change_moves_few_adapters_where_a_fresh_placement_moves_most():
    """A tenth of 200 adapters (120 req/s) 10% hotter: the re-placement moves at most 5% of them (here 2, 1%); a
    fresh placement of the same spec, as the operator applied before, moves 92 (46%: servers that get other
    flags restart vLLM). (At 60 req/s the predictors retrained on vLLM's rules pack both alike.)"""
    adapters = scenario_adapters(rate=120.0)
    before, live = applied(adapters)
    changed = with_rates_up(adapters, share=0.1, factor=1.1)
    after, _, _ = reconcile(pool_document(changed, generation=2), live)
    assert after.moves is not None and not after.moves.afresh
    assert len(after.moves.moved) <= MOST_MOVED_SHARE * len(adapters)
    fresh = place(within(read_adapter_pool(pool_document(changed)).problem, 16), "tessera")
    assert before.placement is not None
    assert len(moves_between(before.placement, fresh, afresh=True).moved) > 10 * max(1, len(after.moves.moved))
    assert sorted(n for s in after.placement.servers for n in s.adapters) == sorted(a["name"] for a in adapters)


def test_a_server_kept_at_its_flags_keeps_its_deployment_byte_identical_whether_its_adapters_change_or_not():
    """Its adapters are recorded in the pool's placement ConfigMap and its --max-cpu-loras stays: no write, so no
    restart and no new generation (which even a changed annotation of a Deployment would be)."""
    adapters = scenario_adapters()
    before, live = applied(adapters)
    after, planned, _ = reconcile(pool_document(with_rates_up(adapters, 0.1, 1.1), generation=2), live)
    assert before.placement is not None and after.placement is not None and after.moves is not None
    old = {s.index: s for s in before.placement.servers}
    kept = [(body, set(old[server.index].adapters) != set(server.adapters))
            for (body, _), server in zip(planned, after.placement.servers)
            if server.index in old and server.index not in after.moves.restarted]
    assert any(changed for _, changed in kept) and not all(changed for _, changed in kept)
    written = {a.body["metadata"]["name"] for a in decide_servers(planned, live, True)
               if isinstance(a, ApplyChild) and a.body["kind"] == "Deployment"}
    for body, _ in kept:
        name = body["metadata"]["name"]
        assert json.dumps(body, sort_keys=True) == json.dumps(as_written(by_name(live)[name]), sort_keys=True)
        assert name not in written


def test_an_adapter_removed_from_the_spec_is_dropped_and_no_other_moves():
    adapters = scenario_adapters()
    _, live = applied(adapters)
    after, _, _ = reconcile(pool_document(adapters[5:], generation=2), live)
    placed = {n for s in after.placement.servers for n in s.adapters}
    assert placed == {a["name"] for a in adapters[5:]}
    assert after.moves is not None and (after.moves.moved, after.moves.dropped) == ((), 5)


def test_a_new_adapter_is_placed_without_moving_any_other():
    adapters = scenario_adapters()
    _, live = applied(adapters)
    after, _, _ = reconcile(pool_document([*adapters, adapter_entry("newcomer", 16, 0.05)], generation=2), live)
    assert "newcomer" in {n for s in after.placement.servers for n in s.adapters}
    assert after.moves is not None and (after.moves.moved, after.moves.added) == ((), 1)


def test_the_placement_read_back_from_the_cluster_is_the_one_applied():
    before, live = applied(scenario_adapters())
    read = previous_placement(live, before.pool.ref, running_servers(live, before.pool.ref), "qwen")
    assert read is not None and before.placement is not None
    assert [(s.index, sorted(s.adapters), s.max_loras, s.max_lora_rank) for s in read.servers] == \
        [(s.index, sorted(s.adapters), s.max_loras, s.max_lora_rank) for s in before.placement.servers]


def test_an_unchanged_spec_re_places_nothing_and_writes_no_server():
    """The reconcile after a re-placement finds it recorded, and keeps it: level-based, no flapping."""
    adapters = scenario_adapters()
    _, live = applied(adapters)
    changed = pool_document(with_rates_up(adapters, 0.1, 1.1), generation=2)
    _, _, live_after = reconcile(changed, live)
    again, planned_again, _ = reconcile(changed, live_after)
    assert again.moves is not None and not again.moves.changed
    assert decide_servers(planned_again, live_after, True) == [] and decide_placement_record(again, live_after) == []


def test_a_pool_without_a_readable_placement_record_is_placed_afresh():
    adapters = scenario_adapters()
    _, live = applied(adapters)
    servers = [c for c in live if c["kind"] == "Deployment"]  # no record: what an older tessera left
    record = next(c for c in live if c["kind"] == "ConfigMap")
    edited = {**record, "data": {PLACEMENT_KEY: '{"servers": [{"index": "x"}]}'}}  # not what tessera wrote
    for children in (servers, [*servers, edited]):
        decided, _, _ = reconcile(pool_document(adapters, generation=2), children)
        assert previous_placement(children, decided.pool.ref, decided.running, "qwen") is None
        assert decided.moves is None


def test_a_re_placement_needing_more_servers_than_a_fresh_one_and_its_slack_gives_way_to_it():
    """8 adapters one server carries, recorded on 8 servers (each keeps running healthy): re-placement would keep
    all 8; a fresh placement needs 1, so 8 > 1 + 1 and the fresh one is applied. On 2 servers, within the slack,
    the re-placement stands."""
    adapters = [adapter_entry(f"a-{i}", 16, 0.2) for i in range(8)]
    problem = within(read_adapter_pool(pool_document(adapters)).problem, 16)
    fresh = place(problem, "tessera")
    assert len(fresh.servers) == 1 and REPLACEMENT_SLACK * 1 < 1

    def recorded(groups: list[list[str]]) -> Placement:
        return Placement("running", "qwen", tuple(ServerPlacement(i, tuple(g), 8, 16, 0.0, True, None)
                                                  for i, g in enumerate(groups)))

    spread = choose_placement(problem, recorded([[a["name"]] for a in adapters]))
    assert spread.moves is not None and spread.moves.afresh and len(spread.placement.servers) == 1
    halves = choose_placement(problem, recorded([[a["name"] for a in adapters[:4]], [a["name"] for a in adapters[4:]]]))
    assert halves.moves is not None and not halves.moves.afresh and halves.moves.moved == ()
    assert len(halves.placement.servers) == 2


def test_a_fresh_placement_that_wins_keeps_each_server_at_the_index_of_the_running_server_it_overlaps_most():
    """The fresh placement (one server) of 8 adapters recorded on 4 servers, 5 of them on server 1 at the fresh
    server's flags: numbered 1, it keeps those 5 where they run (3 moved); numbered 0 as placed, 7 would move."""
    adapters = [adapter_entry(f"a-{i}", 16, 0.2) for i in range(8)]
    problem = within(read_adapter_pool(pool_document(adapters)).problem, 16)
    (fresh,) = place(problem, "tessera").servers
    names = [a["name"] for a in adapters]
    groups = [names[:1], names[1:6], names[6:7], names[7:]]
    recorded = Placement("running", "qwen", tuple(ServerPlacement(i, tuple(g), fresh.max_loras, fresh.max_lora_rank,
                                                                  0.0, True, None) for i, g in enumerate(groups)))
    chosen = choose_placement(problem, recorded)
    assert chosen.moves is not None and chosen.moves.afresh
    assert [s.index for s in chosen.placement.servers] == [1]
    assert chosen.moves.moved == tuple(names[:1] + names[6:]) and chosen.moves.restarted == ()


def test_fresh_servers_no_running_server_shares_adapters_with_take_the_lowest_indices_left():
    recorded = Placement("running", "qwen", (ServerPlacement(0, ("a", "b"), 4, 16, 0.0, True, None),
                                             ServerPlacement(2, ("c",), 4, 16, 0.0, True, None)))
    fresh = Placement("tessera", "qwen", tuple(ServerPlacement(i, adapters, 4, 16, 0.0, True, None)
                                               for i, adapters in enumerate([("x",), ("c", "y"), ("z",), ("a",)])))
    assert [s.index for s in matched_to(recorded, fresh).servers] == [1, 2, 3, 0]


def test_status_says_what_the_last_re_placement_moved_with_an_event_and_keeps_it_on_later_reconciles():
    adapters = scenario_adapters()
    _, live = applied(adapters)
    changed = with_rates_up(adapters, 0.1, 1.1)
    after, planned, live_after = reconcile(pool_document(changed, generation=2), live)
    verdict = pool_status(after.pool, after, planned, live_after)
    status = st.build_status(2, *verdict, after.pool.status, NOW)
    last = status["plan"]["lastReplacement"]
    assert last["adaptersMoved"] == len(after.moves.moved) and last["placedAfresh"] is False
    assert last["adaptersMoved"] + last["adaptersKept"] == len(adapters) and last["adaptersAdded"] == 0
    events = [a.body for a in decide_pool_status(after.pool, status, NOW) if isinstance(a, PostEvent)]
    replaced = [e for e in events if e["reason"] == st.ADAPTERS_REPLACED]
    assert (len(replaced) == 1) == (last["adaptersMoved"] > 0)

    settled = pool_document(changed, generation=2, status=status)
    again, planned_again, _ = reconcile(settled, live_after)
    status_again = st.build_status(2, *pool_status(again.pool, again, planned_again, live_after),
                                   again.pool.status, NOW)
    assert status_again["plan"]["lastReplacement"] == last
    assert decide_pool_status(again.pool, status_again, NOW) == []


def test_a_server_emptied_by_removals_is_deleted_and_the_others_keep_their_names():
    adapters = scenario_adapters()
    before, live = applied(adapters)
    assert before.placement is not None and len(before.placement.servers) >= 2
    first = set(before.placement.servers[0].adapters)
    after, planned, _ = reconcile(pool_document([a for a in adapters if a["name"] not in first], generation=2), live)
    actions = decide_servers(planned, live, True)
    deleted = [(a.child["kind"], a.child["metadata"]["name"]) for a in actions if isinstance(a, DeleteChild)]
    assert deleted == [("Deployment", planned_first_name(before)), ("PodDisruptionBudget", planned_first_name(before))]
    assert [s.index for s in after.placement.servers] == [s.index for s in before.placement.servers[1:]]
    assert not [a for a in actions if isinstance(a, ApplyChild)]


def test_the_record_of_2000_adapters_stays_far_inside_a_config_maps_limit():
    """Names of 63 characters, the most a DNS label holds, on 256 servers (the most a pool has)."""
    names = [f"{i:04d}-" + "x" * 58 for i in range(2000)]
    servers = tuple(ServerPlacement(i, tuple(names[i::256]), 8, 16, 0.0, True, None) for i in range(256))
    decided, _ = applied(scenario_adapters(8, 1.0))
    body = placement_record(decided.pool.ref, Placement("tessera", "qwen", servers))
    assert len(json.dumps(body)) < 1024 * 1024 // 4


def broken(document: dict) -> dict:
    """The pool's spec edited into one the placement refuses (a prompt longer than the model's context)."""
    document["spec"]["meanPromptTokens"] = 5000
    return document


def kept_by_invalid(document: dict, live: list[dict]) -> PoolServers:
    pools = AdapterPools(Actor(None, VllmClient(2), FetcherClient(2)), SETTINGS)  # type: ignore[arg-type]  # plans only, acts never
    obj = read_adapter_pool(document)
    assert not obj.valid
    (decided,) = pools.plan(GPUS, [obj], live, {}, {})
    return decided


def servers_and_adapters(placement: Placement | None) -> list[tuple[int, list[str]]]:
    assert placement is not None
    return [(s.index, sorted(s.adapters)) for s in placement.servers]


def test_an_invalid_pool_keeps_its_pods_loaded_with_the_placement_in_force_read_back_from_its_config_map():
    """Not the status (empty here) nor a fresh placement: the record of what its servers were given, on their GPUs;
    nothing is written for it (no record, no server)."""
    adapters = scenario_adapters(60)
    before, live = applied(adapters)
    kept = kept_by_invalid(broken(pool_document(adapters, generation=2)), live)
    assert servers_and_adapters(kept.placement) == servers_and_adapters(before.placement)
    assert kept.slots == before.slots and set(kept.held) == set(before.slots)
    assert placed_adapters([kept]) == placed_adapters([before])
    assert decide_placement_record(kept, live) == [] and planned_servers(GPUS, kept, SETTINGS, set(), {}) == []


def test_an_invalid_pool_reports_the_placement_in_force_in_its_invalid_condition():
    adapters = scenario_adapters(60)
    before, live = applied(adapters)
    kept = kept_by_invalid(broken(pool_document(adapters, generation=2)), live)
    phase, conditions, summary = pool_status(kept.pool, kept, [], live)
    invalid = next(c for c in conditions if c.type == st.INVALID)
    assert phase == st.PHASE_INVALID and summary is None  # status.plan stays as the last valid reconcile wrote it
    assert before.placement is not None
    assert (f"the placement in force: 60 adapters on {len(before.placement.servers)} server(s) (ConfigMap "
            f"bots-placement") in invalid.message


def test_an_invalid_pool_keeps_only_recorded_servers_that_still_run():
    adapters = scenario_adapters(60)
    before, live = applied(adapters)
    assert before.placement is not None and len(before.placement.servers) > 1
    gone = planned_first_name(before)
    kept = kept_by_invalid(broken(pool_document(adapters, generation=2)),
                           [c for c in live if c["metadata"]["name"] != gone])
    assert [i for i, _ in servers_and_adapters(kept.placement)] == [s.index for s in before.placement.servers[1:]]


def test_an_invalid_pool_without_a_readable_record_keeps_its_servers_unloaded_as_before():
    adapters = scenario_adapters(60)
    _, live = applied(adapters)
    without_record = [c for c in live if c["kind"] != "ConfigMap"]
    kept = kept_by_invalid(broken(pool_document(adapters, generation=2)), without_record)
    assert kept.placement is None and placed_adapters([kept]) == {} and kept.held
