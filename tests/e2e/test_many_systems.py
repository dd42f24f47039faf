"""A pool's first plan of several systems is made system by system, packed and checked as a whole (issue 29 item
7, planner/decompose.py): the operator's solve worker takes the decomposed path, and the cluster runs that plan."""

from __future__ import annotations

import json

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import system_yaml, wait_ready

READY_TIMEOUT_S = 180
NAMES = ["one", "two", "three", "four"]


def stored_plan(core, operator) -> dict:
    (state,) = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                if c.metadata.name.startswith("tessera-pool-")]
    return json.loads(state.data["plan"])


def test_the_first_plan_of_four_systems_on_a_fresh_pool_is_decomposed_and_serves_each_in_full(run_operator, core,
                                                                                             custom, kubectl):
    # The systems exist before the operator starts, so its first solve plans all four on the fresh pool (applied
    # one by one to a running operator, the first solve could see one, and every later one has a plan in force:
    # joint). With --joint-only the stored plan reads "joint" and this test fails.
    operator = run_operator(nodes=2)
    kubectl("apply", "-n", operator.namespace, "-f", "-",
            input="---\n".join(system_yaml(name, demandRequestsPerSecond=1000 * (i + 1))
                               for i, name in enumerate(NAMES)))
    operator.start()
    found = wait_ready(custom, operator.namespace, NAMES, READY_TIMEOUT_S, operator)
    plan = stored_plan(core, operator)
    assert plan["solver"]["method"] == "decomposed", plan["solver"].get("fallback")
    for name in NAMES:
        summary = found[name]["status"]["plan"]
        assert summary["servedRequestsPerSecond"] == summary["demandRequestsPerSecond"], name
