"""One bad system cannot stall the rest, on the test cluster (issue 29 item 5).

Two GPU pools under one operator, its solver capped at CAP_MB: an H100 node (pool A) and an A100 node (pool B).
Pool A gets the 64 tasks x 16 variants system (hostile/corpus.py's wide_spec) next to two ordinary ones: it
exceeds the cap on every try (the pool's solve, then its own alone), turns Invalid `TooLargeToPlan` naming its
size and the size measured to fit under the same cap, with a Warning Event, and the ordinary ones are planned
without it and Ready. An ordinary system applied to pool B once pool A's solve runs is Ready before pool A's
solve ends (the large one marked): the two pools were solved at the same time. With `--solve-workers 1` (one
pool after another, as before) the same test fails at that step: pool B's solve waits for pool A's. A restart
solves nothing again: the record is in the pool's stored plan; a smaller spec under the same name is planned.
"""

from __future__ import annotations

import json
from datetime import datetime

import yaml

from cluster.gpu_nodes import create_gpu_nodes
from cluster.kube import wait_for, wait_node_ready
from hostile.corpus import wide_spec

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import H100, POOL_LABEL, condition, is_true, system_yaml, systems, wait_ready

A100 = "NVIDIA-A100-SXM4-80GB"
POOL_ANNOTATION = "tessera.ai/gpu-product"
CAP_MB = 300
WORKERS = 2
LARGE = "wide-64x16"
TIMEOUT_S = 180


def in_pool(document: dict, product: str) -> str:
    document["metadata"].setdefault("annotations", {})[POOL_ANNOTATION] = product
    return yaml.safe_dump(document)


def ordinary(name: str, product: str) -> str:
    return in_pool(yaml.safe_load(system_yaml(name)), product)


def since(obj: dict, kind: str) -> datetime:
    return datetime.fromisoformat(condition(obj, kind)["lastTransitionTime"].replace("Z", "+00:00"))


def reconciles(operator) -> float:
    try:
        return operator.metric("tessera_reconciles_total")
    except OSError:  # its metrics are not served yet
        return 0


def test_a_system_too_large_to_plan_is_left_out_and_another_pool_is_planned_while_its_pool_solves(
        run_operator, core, custom, kubectl):
    operator = run_operator(nodes=1)
    (a100,) = create_gpu_nodes(core, 1, A100, name_prefix=f"a100-{operator.pool.id}")
    core.patch_node(a100, {"metadata": {"labels": {POOL_LABEL: operator.pool.id}}})
    wait_node_ready(core, a100)
    operator.pool.nodes.append(a100)  # the fixture deletes it with the pool
    operator.extra_args = ["--solve-memory", str(CAP_MB), "--solve-time-limit", "10",
                           "--solve-workers", str(WORKERS)]
    operator.start()
    namespace = operator.namespace
    for document in (in_pool(wide_spec(64, 16), H100), ordinary("small-a", H100), ordinary("small-b", H100)):
        kubectl("apply", "-n", namespace, "-f", "-", input=document)
    # the reconcile does not wait for pool A's solve: its systems read Planning while it runs
    wait_for(lambda: all(condition(systems(custom, namespace).get(n, {}), "Planned") for n in (LARGE, "small-a")),
             60, "pool A's systems planning")
    kubectl("apply", "-n", namespace, "-f", "-", input=ordinary("probe", A100))

    probe = wait_ready(custom, namespace, ["probe"], TIMEOUT_S, operator)["probe"]

    def large_left_out():
        found = systems(custom, namespace)
        return found if is_true(found[LARGE], "Invalid") else None
    found = wait_for(large_left_out, TIMEOUT_S, "the large system left out")
    assert since(probe, "Ready") < since(found[LARGE], "Invalid"), \
        "pool B's system was Ready before pool A's solve ended: solved beside it"
    # the ordinary ones are planned before the size that fits is measured, then the message names it
    wait_ready(custom, namespace, ["small-a", "small-b"], TIMEOUT_S, operator)
    found = wait_for(lambda: (s := systems(custom, namespace)) and "variants) plans alone under them" in condition(
        s[LARGE], "Invalid")["message"] and s, TIMEOUT_S, "the size that fits measured")
    invalid = condition(found[LARGE], "Invalid")
    assert invalid["reason"] == "TooLargeToPlan", invalid
    assert "64 tasks x 16 variants" in invalid["message"] and f"memory cap {CAP_MB} MiB" in invalid["message"]
    assert "plans alone under them" in invalid["message"], "the size measured to fit is named"
    assert "raise the time limit" not in invalid["message"]
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    assert any(e["type"] == "Warning" and e["reason"] == "TooLargeToPlan" and e["involvedObject"]["name"] == LARGE
               for e in events)

    operator.stop()
    operator.start()
    wait_for(lambda: reconciles(operator) >= 2, 60, "two reconciles after the restart")
    assert operator.metric("tessera_solve_seconds_count") == 0, "the stored plan, with its record, stands"
    assert condition(systems(custom, namespace)[LARGE], "Invalid")["reason"] == "TooLargeToPlan"

    fixed = wide_spec(8, 2)
    fixed["metadata"]["name"] = LARGE
    kubectl("apply", "-n", namespace, "-f", "-", input=in_pool(fixed, H100))
    wait_ready(custom, namespace, [LARGE], TIMEOUT_S, operator)  # a smaller spec is planned again
