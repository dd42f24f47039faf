"""Priorities between two namespaces with quotas on one small pool (issue 29 items 1 and 2), on the test cluster.

One H100 (7 compute slices). Each namespace's ResourceQuota allows only 1g.10gb instances (every other
MIG profile at 0): 7 for team "high", 4 for team "low", so the layout stays 7 x 1g.10gb and no node is
re-partitioned. Each system asks for 5,000 requests/s, about 4 instances' worth: both cannot be served.
The lower-priority system degrades first, within its quota (every pod of it admitted by the API server's
own quota check, no FailedCreate), its status names the higher-priority system that took the capacity
and shows its share of the pool; raising its priority re-plans, and the other system reads so.

What makes it fail if tessera did not do it: the conditions and the shares are written by tessera alone
(the stand-ins write no status), and the quota admission is the API server's.
"""

from __future__ import annotations

import json

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import condition, new_namespace, system_yaml, systems

PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
DEMAND = 5000
TIMEOUT_S = 90


def only_small_instances(core, namespace: str, instances: int) -> None:
    hard = {f"requests.nvidia.com/mig-{p}": str(instances) if p == "1g.10gb" else "0" for p in PROFILES}
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "gpus"}, "spec": {"hard": hard}})


def wait_degraded(custom, operator, namespace: str, name: str, reason: str, what: str) -> dict:
    def degraded():
        found = condition(systems(custom, namespace).get(name, {}), "Degraded")
        return found if found and found["status"] == "True" and found["reason"] == reason else None
    try:
        return wait_for(degraded, TIMEOUT_S, what)
    except TimeoutError:
        status = systems(custom, namespace).get(name, {}).get("status")
        raise AssertionError(f"{what}: {json.dumps(status, indent=1)}\n{operator.log_text()}") from None


def replicas(obj: dict) -> int:
    return sum(c["replicas"] for t in obj["status"]["plan"]["tasks"] for c in t["configurations"])


def test_the_lower_priority_system_degrades_first_within_its_quota_naming_who_took_the_capacity_and_raising_it_re_plans(
        run_operator, core, custom, kubectl):
    operator = run_operator(nodes=1, gpus_per_node=1)
    high_ns, low_ns = operator.namespace, new_namespace(core, "low")
    try:
        operator.extra_args = ["--namespace", low_ns]
        only_small_instances(core, high_ns, 7)
        only_small_instances(core, low_ns, 4)
        kubectl("apply", "-n", high_ns, "-f", "-", input=system_yaml("high", demandRequestsPerSecond=DEMAND,
                                                                     poolPriority=10))
        kubectl("apply", "-n", low_ns, "-f", "-", input=system_yaml("low", demandRequestsPerSecond=DEMAND))
        operator.start()

        preempted = wait_degraded(custom, operator, low_ns, "low", "PreemptedByPriority",
                                  "the lower-priority system Degraded PreemptedByPriority")
        assert f"{high_ns}/high (poolPriority 10, " in preempted["message"], preempted["message"]
        high, low = systems(custom, high_ns)["high"], systems(custom, low_ns)["low"]
        assert condition(high, "Degraded")["reason"] == "DemandServed"
        assert low["status"]["plan"]["servedRequestsPerSecond"] < DEMAND
        assert replicas(low) <= 4 and replicas(high) + replicas(low) <= 7
        assert high["status"]["plan"]["poolSlices"] == low["status"]["plan"]["poolSlices"] == 7
        assert high["status"]["plan"]["poolSharePercent"] > low["status"]["plan"]["poolSharePercent"] > 0

        pods = lambda: core.list_namespaced_pod(low_ns).items  # noqa: E731
        wait_for(lambda: len(pods()) == replicas(low) or None, 60, "the lower-priority system's pods admitted")
        events = core.list_namespaced_event(low_ns).items
        assert [e.message for e in events if e.reason == "FailedCreate"] == [], "no pod was refused by the quota"
        used = core.read_namespaced_resource_quota("gpus", low_ns).status.used
        assert int(used.get("requests.nvidia.com/mig-1g.10gb", "0")) <= 4

        kubectl("patch", "compoundinferencesystem", "low", "-n", low_ns, "--type", "merge",
                "-p", json.dumps({"spec": {"poolPriority": 20}}))
        turned = wait_degraded(custom, operator, high_ns, "high", "PreemptedByPriority",
                               "after the raise, the other system Degraded PreemptedByPriority")
        assert f"{low_ns}/low (poolPriority 20, " in turned["message"], turned["message"]
        # the same reconcile writes the other status next
        served = wait_for(lambda: (found := systems(custom, low_ns)["low"]) and
                          condition(found, "Degraded")["reason"] == "DemandServed" and found, 30,
                          "the raised system served in full")
        assert replicas(served) > replicas(low) and replicas(served) <= 4
        wait_for(lambda: len(pods()) == replicas(served) or None, 60, "the raised system's pods admitted")
        events = core.list_namespaced_event(low_ns).items
        assert [e.message for e in events if e.reason == "FailedCreate"] == [], "no pod was refused by the quota"
    finally:
        core.delete_namespace(low_ns)
