"""A system added to a pool's running ones is planned incrementally (issue 29 item 7, planner/decompose.py): the
running systems' parts are kept as in force, so the cluster leaves their servers alone while the new one comes up."""

from __future__ import annotations

import json

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import server_fingerprints, system_yaml, wait_ready

READY_TIMEOUT_S = 180
RUNNING = ["one", "two", "three", "four"]
ADDED = "five"


def stored_plan(core, operator) -> dict:
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    return json.loads(state.data["plan"])


def test_a_fifth_system_added_to_four_running_keeps_their_parts_and_leaves_their_servers_untouched(
        run_operator, core, custom, kubectl):
    # The re-plan that adds the fifth has a plan in force: before incremental re-plans it was joint. With
    # --joint-only the stored plan reads "joint" and this test fails. (The joint solve, pricing change, kept these
    # four servers too when checked: the servers' check says the cluster carries the kept parts out untouched, not
    # that a joint re-plan would have moved them.)
    operator = run_operator(nodes=2)
    kubectl("apply", "-n", operator.namespace, "-f", "-",
            input="---\n".join(system_yaml(name, demandRequestsPerSecond=1000 * (i + 1))
                               for i, name in enumerate(RUNNING)))
    operator.start()
    wait_ready(custom, operator.namespace, RUNNING, READY_TIMEOUT_S, operator)
    servers = server_fingerprints(custom.api_client, operator.namespace)
    assert len(servers) >= len(RUNNING)

    kubectl("apply", "-n", operator.namespace, "-f", "-", input=system_yaml(ADDED, demandRequestsPerSecond=2500))
    found = wait_ready(custom, operator.namespace, [ADDED], READY_TIMEOUT_S, operator)
    plan = stored_plan(core, operator)
    assert plan["solver"]["method"] == "incremental", plan["solver"].get("fallback")
    assert plan["solver"]["kept"] == sorted(f"{operator.namespace}/{name}" for name in RUNNING)
    summary = found[ADDED]["status"]["plan"]
    assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"]
    # The running systems' server Deployments: the same objects (uid), never edited (generation) nor rolled.
    after = server_fingerprints(custom.api_client, operator.namespace)
    assert {name: after.get(name) for name in servers} == servers
