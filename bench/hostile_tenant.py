"""The hostile tenant at fifty systems: what the first namespace keeps while a second applies fifty (issue 28).

One command: `nice .venv/bin/python -P bench/hostile_tenant.py [--tenants 50]`.

The scenario of tests/e2e/test_hostile_tenant.py's first test (which applies
ten), on the same harness (tests/cluster: etcd, kube-apiserver,
controller-manager, scheduler, KWOK; the MIG-manager stand-in; `tessera
operator` as a subprocess through tests/e2e/operator_harness.py): a pool of
two nodes of eight H100s, `steady` (the single-model example at 200
requests/s) Ready in namespace `first`, then fifty schema-valid systems of
6,000 requests/s each applied at once in namespace `tenant` (about fifty
GPUs of demand on sixteen). Waited for: the joint re-plan stored
(tessera_plans_stored_total) and reported in every tenant system's status
(observedGeneration, Planned, status.plan), the tenant's servers available,
then two more reconciles.

Measured: the time from the apply to the plan stored and reported, and to
the tenant's servers available; the planner's solve time (the operator's
log); from the API server's audit log, every DELETE of a Deployment of
`first` (by anyone) and the operator's writes to them; each of `first`'s
Deployments' uid, generation and pod-template digest before and after; what
the tenant's systems are served and how many read HeldForRunningSystems.

Results: bench/results/hostile_tenant.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kubernetes import client, config  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane  # noqa: E402
from cluster.gpu_operator import install_cluster_policy  # noqa: E402
from cluster.kube import ensure_namespace, wait_crd_established, wait_for  # noqa: E402
from cluster.mig_manager_standin import MigManagerStandIn  # noqa: E402
from e2e.operator_harness import (OperatorProcess, audit_lines, condition, make_pool, operator_writes,  # noqa: E402
                                  server_fingerprints, system_yaml, systems)
from e2e.test_hostile_tenant import deployment_deletes, planned_and_reported, servers_available  # noqa: E402

RESULTS = REPO / "bench" / "results"
FIRST, TENANT = "first", "tenant"
TENANT_RPS = 6000
TIMEOUT_S = 900
PLANS = "tessera_plans_stored_total"


def kubectl(cluster: ControlPlane, *args: str, stdin: str | None = None) -> None:
    subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args], input=stdin,
                   text=True, check=True, capture_output=True)


def solve_seconds(log: Path) -> list[float]:
    """The operator's solve times of the pool, from its log lines `pool ...: solve of N system(s) ... (S s)`."""
    return [float(m.group(1)) for m in re.finditer(r"solve of \d+ system\(s\) on \d+ GPUs: .*\(([\d.]+) s\)",
                                                     log.read_text(errors="replace"))]


def run_once(workdir: Path, tenants: int) -> dict:
    cluster = ControlPlane(workdir / "cluster", bins=bin_dir()).start()
    standin = operator = None
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        kubectl(cluster, "apply", "-f", str(REPO / "crds"))
        wait_crd_established(api, "compoundinferencesystems.tessera.ai")
        ensure_namespace(core, "gpu-operator")
        install_cluster_policy(api, "tessera-mig-parted-config")
        standin = MigManagerStandIn(core, namespace="gpu-operator", configmap_delay=1.0).start()
        for namespace in (FIRST, TENANT):
            ensure_namespace(core, namespace)
            wait_for(lambda ns=namespace: core.list_namespaced_service_account(ns).items, 60, "default service account")
        pool = make_pool(core, 2, gpus_per_node=8)
        operator = OperatorProcess(cluster.kubeconfig, workdir, FIRST, pool, f"tessera-{pool.id}", resync_s=3.0,
                                   extra_args=["--namespace", TENANT, "--solve-time-limit", "300"])
        operator.start()
        kubectl(cluster, "apply", "-n", FIRST, "-f", "-", stdin=system_yaml("steady"))
        wait_for(lambda: condition(systems(custom, FIRST).get("steady", {}), "Ready") is not None and condition(
            systems(custom, FIRST)["steady"], "Ready")["status"] == "True", TIMEOUT_S, "steady Ready")
        before, start, plans = server_fingerprints(api, FIRST), audit_lines(cluster.audit_log), operator.metric(PLANS)
        names = [f"grab-{i}" for i in range(tenants)]
        applied = time.monotonic()
        kubectl(cluster, "apply", "-n", TENANT, "-f", "-",
                stdin="---\n".join(system_yaml(n, demandRequestsPerSecond=TENANT_RPS) for n in names))
        wait_for(lambda: operator.metric(PLANS) > plans and planned_and_reported(custom, TENANT, names), TIMEOUT_S,
                 "the joint re-plan stored and reported", interval=1.0)
        reported = time.monotonic() - applied
        wait_for(lambda: servers_available(api, TENANT), TIMEOUT_S, "the tenant's servers available", interval=1.0)
        available = time.monotonic() - applied
        reconciles = operator.metric("tessera_reconciles_total")
        wait_for(lambda: operator.metric("tessera_reconciles_total") >= reconciles + 2, 120, "two reconciles after")
        after = server_fingerprints(api, FIRST)
        writes = [(w["verb"], w["objectRef"].get("name")) for w in operator_writes(cluster.audit_log, start)
                  if w["objectRef"].get("resource") == "deployments" and w["objectRef"].get("namespace") == FIRST]
        tenant = systems(custom, TENANT)
        served = [(tenant[n]["status"].get("plan") or {}).get("servedRequestsPerSecond", 0) for n in names]
        held = sum((condition(tenant[n], "Degraded") or {}).get("reason") == "HeldForRunningSystems" for n in names)
        return {
            "tenants": tenants, "tenant_rps": TENANT_RPS, "pool_gpus": 16,
            "replan_reported_s": round(reported, 1), "tenant_servers_available_s": round(available, 1),
            "solve_s": solve_seconds(operator.log),
            "first_deployments": len(before), "first_deployment_deletes": len(deployment_deletes(
                cluster.audit_log, start, FIRST)),
            "first_operator_writes": writes, "first_unchanged": before == after,
            "steady_ready": condition(systems(custom, FIRST)["steady"], "Ready")["status"] == "True",
            "tenant_systems_served": sum(s > 0 for s in served), "tenant_served_rps": round(sum(served), 1),
            "tenant_held_for_running_systems": held,
        }
    finally:
        if operator is not None:
            operator.stop()
        if standin is not None:
            standin.stop()
        cluster.stop()


def markdown(run: dict) -> str:
    rows = [(key.replace("_", " "), value) for key, value in run.items()]
    return "\n".join(["# The hostile tenant at fifty systems (bench/hostile_tenant.py)", "",
                      "| measure | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-hostile-tenant-") as folder:
        run = run_once(Path(folder), args.tenants)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hostile_tenant.json").write_text(json.dumps(run, indent=1) + "\n")
    (RESULTS / "hostile_tenant.md").write_text(markdown(run))
    print(markdown(run))


if __name__ == "__main__":
    main()
