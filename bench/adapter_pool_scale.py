"""An AdapterPool of 2,000 adapters through the operator on the test cluster: time to Ready, sizes, memory, writes.

One command (outside the test command; `nice` it on a shared machine):

    nice .venv/bin/python -P bench/adapter_pool_scale.py [--adapters 2000] [--rate 300] [--nodes 2] [--gpus-per-node 8]

It starts the real test cluster (tests/cluster), the MIG-manager stand-in,
fake H100 nodes, the vLLM stand-in (tests/cluster/vllm_standin.py, one vLLM
process per fake pod, in this process) and `tessera operator` as a
subprocess reaching the pods' servers through `--adapter-server-url`, as the
end-to-end tests do. The pool is tests/e2e/scale_pool.py's (ranks 8-64,
skewed rates, every other name too long for `<pool>-<adapter>`), applied with
`kubectl apply --server-side` (a client-side apply is tried first with
`--dry-run=server`: its last-applied annotation holds the whole object).
Recorded:

- seconds from the apply to the pool Ready (every server's pod gated open by
  tessera once its server lists its adapters), and to every adapter's route
  listing exactly its server's pod;
- the bytes of kopf's own annotations, of the pool's status and its
  status.plan, and of the whole object with its managedFields;
- the operator's peak resident memory (VmHWM);
- the operator's API writes from the API server's audit log (Lease renewals
  not counted), by resource and verb, until every route is right, and in idle
  resyncs after;
- each reconcile's seconds and writes as the operator logged them (where the
  time goes).

Writes bench/results/adapter_pool_scale.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import yaml  # noqa: E402
from kubernetes import client, config  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane  # noqa: E402
from cluster.gpu_operator import install_cluster_policy  # noqa: E402
from cluster.kube import ensure_namespace, wait_crd_established, wait_for  # noqa: E402
from cluster.mig_manager_standin import MigManagerStandIn  # noqa: E402
from cluster.vllm_standin import VllmStandin  # noqa: E402
from cluster.weights_store import S3Store, WeightsStore  # noqa: E402
from e2e.operator_harness import (OperatorProcess, audit_lines, is_true, make_pool, new_namespace,  # noqa: E402
                                  operator_writes)
from e2e.scale_pool import kopf_annotation_bytes, placed, plan_bound, routes, scale_pool  # noqa: E402

RESULTS = REPO / "bench" / "results"
RESYNC_S = 5.0
IDLE_S = 16.0
"""Three idle resyncs after every route is right: their writes are counted."""
TIMEOUT_S = 1800.0
RECONCILED = re.compile(r"reconciled \(([\w+]+)\) in ([\d.]+) s: (\d+) write\(s\)")


def peak_rss_mb(pid: int) -> float:
    found = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def writes_by_kind(writes: list[dict]) -> dict[str, int]:
    """How many writes of each verb and resource (with its subresource: pods/status), most first."""
    def kind(write: dict) -> str:
        ref = write["objectRef"]
        return f"{write['verb']} {ref.get('resource')}" + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return dict(Counter(map(kind, writes)).most_common())


def server_seconds(writes: list[dict]) -> float:
    """Seconds the API server spent on the writes, from receiving each to its response (the audit log's stamps): the
    rest of the operator's time between them is its own (building, sending, reading the answer)."""
    def stamp(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    return sum(stamp(w["stageTimestamp"]) - stamp(w["requestReceivedTimestamp"]) for w in writes)


def read_pool(custom: client.CustomObjectsApi, namespace: str, name: str) -> tuple[dict, int]:
    """The AdapterPool, and its size as the API server sends it (JSON, managedFields included)."""
    raw = custom.get_namespaced_custom_object("tessera.ai", "v1alpha1", namespace, "adapterpools", name,
                                              _preload_content=False).data
    return json.loads(raw), len(raw)


def reconciles(log: Path) -> list[dict]:
    return [{"kind": kind, "s": float(seconds), "writes": int(writes)}
            for kind, seconds, writes in RECONCILED.findall(log.read_text(errors="replace"))]


def run(adapters: int, rate: float, nodes: int, gpus_per_node: int, workdir: Path) -> dict:
    bins = bin_dir()
    cluster = ControlPlane(workdir / "cluster", bins=bins).start()
    mig = vllm = operator = s3 = store = None
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        discovery = client.DiscoveryV1Api(api)
        kubectl = [str(bins / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
        subprocess.run([*kubectl, "apply", "-f", str(REPO / "crds")], check=True, capture_output=True)
        wait_crd_established(api, "adapterpools.tessera.ai")
        ensure_namespace(core, "gpu-operator")
        install_cluster_policy(api, "tessera-mig-parted-config")
        mig = MigManagerStandIn(core, namespace="gpu-operator", configmap_delay=1.0).start()
        s3 = S3Store().start()
        store = WeightsStore(s3, workdir / "adapters").start()
        vllm = VllmStandin(adapter_root=store.folder).start()
        pool = make_pool(core, nodes, gpus_per_node)
        operator = OperatorProcess(cluster.kubeconfig, workdir, new_namespace(core, "bench"), pool,
                                   state_namespace=f"tessera-{pool.id}", resync_s=RESYNC_S,
                                   extra_args=["--adapter-server-url", vllm.url_template,
                                               "--adapter-fetcher-url", store.fetcher_url]).start()
        namespace = operator.namespace
        wait_for(lambda: b"reconciled" in operator.log.read_bytes(), 120, "the operator's first reconcile")

        document = scale_pool(adapters, rate, max_servers=nodes * gpus_per_node)
        s3.upload(document)
        name = document["metadata"]["name"]
        servers = placed(document, nodes * gpus_per_node)
        text = yaml.safe_dump(document)
        client_side = subprocess.run([*kubectl, "apply", "--dry-run=server", "-n", namespace, "-f", "-"],
                                     input=text, text=True, capture_output=True)
        first_line = audit_lines(cluster.audit_log)
        reconciled_before = len(reconciles(operator.log))
        applied = time.monotonic()
        subprocess.run([*kubectl, "apply", "--server-side", "-n", namespace, "-f", "-"], input=text, text=True,
                       check=True, capture_output=True)

        def until(predicate, what: str):
            def checked():
                if not operator.alive():
                    raise RuntimeError(f"operator exited; see {operator.log}")
                return predicate()
            return wait_for(checked, TIMEOUT_S, what, interval=1.0)

        until(lambda: is_true(read_pool(custom, namespace, name)[0], "Ready"), "the pool Ready")
        ready = time.monotonic()
        holders = {a: sorted(p.metadata.name for p in core.list_namespaced_pod(
            namespace, label_selector=f"tessera.ai/deployment={d}").items) for d, names in servers.items() for a in names}
        until(lambda: routes(core, discovery, namespace, name)[1] == holders, "every adapter's route")
        routed = time.monotonic()
        until_routed = operator_writes(cluster.audit_log, first_line)
        reconciled_before_idle = len(reconciles(operator.log))
        idle_line = audit_lines(cluster.audit_log)
        time.sleep(IDLE_S)
        idle = operator_writes(cluster.audit_log, idle_line)

        found, object_bytes = read_pool(custom, namespace, name)
        managed = json.dumps(found["metadata"].get("managedFields") or [])
        logged = reconciles(operator.log)
        busy = logged[reconciled_before:reconciled_before_idle]
        return {
            "adapters": adapters, "rate_rps": rate, "nodes": nodes, "gpus_per_node": gpus_per_node,
            "servers": len(servers), "adapters_per_server": sorted(len(a) for a in servers.values()),
            "load_average": round(os.getloadavg()[0], 1),
            "spec_yaml_bytes": len(text),
            "client_side_apply": "accepted" if client_side.returncode == 0 else " ".join(client_side.stderr.split())[:300],
            "apply_to_ready_s": round(ready - applied, 1),
            "apply_to_every_route_s": round(routed - applied, 1),
            "kopf_annotation_bytes": kopf_annotation_bytes(found),
            "status_bytes": len(json.dumps(found["status"])),
            "status_plan_bytes": len(json.dumps(found["status"]["plan"])),
            "status_plan_bound_bytes": plan_bound(len(servers)),
            "route_exceptions": found["status"]["plan"]["routes"]["serviceExceptionsCount"],
            "route_exceptions_listed": len(found["status"]["plan"]["routes"]["serviceExceptions"]),
            "object_bytes": object_bytes, "managed_fields_bytes": len(managed),
            "operator_peak_rss_mb": round(peak_rss_mb(operator.process.pid), 1),
            "writes_until_every_route": len(until_routed),
            "writes_until_every_route_by_kind": writes_by_kind(until_routed),
            "writes_until_every_route_api_server_s": round(server_seconds(until_routed), 1),
            "idle_s": IDLE_S, "idle_writes": len(idle), "idle_writes_by_kind": writes_by_kind(idle),
            "reconciles_until_every_route": len(busy),
            "reconcile_s_total": round(sum(r["s"] for r in busy), 1),
            "reconciles_slowest": sorted(busy, key=lambda r: -r["s"])[:5],
            "idle_reconciles": logged[reconciled_before_idle:],
        }
    finally:
        if operator is not None:
            operator.stop()
        for standin in (vllm, mig, store, s3):
            if standin is not None:
                standin.stop()
        cluster.stop()


def markdown(r: dict) -> str:
    slowest = ", ".join(f"{x['s']} s ({x['kind']}, {x['writes']} writes)" for x in r["reconciles_slowest"])
    rows = [
        ("servers (adapters each)", f"{r['servers']} ({', '.join(map(str, r['adapters_per_server']))})"),
        ("apply -> pool Ready", f"{r['apply_to_ready_s']} s"),
        ("apply -> every adapter's route lists its server's pod", f"{r['apply_to_every_route_s']} s"),
        ("kopf's own annotations on the pool", f"{r['kopf_annotation_bytes']} B"),
        ("status (JSON)", f"{r['status_bytes']} B"),
        ("status.plan (JSON; its bound, tests/e2e/scale_pool.plan_bound)",
         f"{r['status_plan_bytes']} B ({r['status_plan_bound_bytes']} B)"),
        ("routes named otherwise (listed)", f"{r['route_exceptions']} ({r['route_exceptions_listed']})"),
        ("the whole object as stored (its managedFields)", f"{r['object_bytes']} B ({r['managed_fields_bytes']} B)"),
        ("spec as YAML; client-side `kubectl apply`", f"{r['spec_yaml_bytes']} B; {r['client_side_apply']}"),
        ("operator peak RSS (VmHWM)", f"{r['operator_peak_rss_mb']} MB"),
        ("operator writes until every route (audit log)", f"{r['writes_until_every_route']}: "
         + ", ".join(f"{k} {v}" for k, v in r["writes_until_every_route_by_kind"].items())),
        ("of which the API server's own time (audit log: received to response)",
         f"{r['writes_until_every_route_api_server_s']} s"),
        (f"operator writes in {r['idle_s']:g} s idle after", f"{r['idle_writes']}"
         + (": " + ", ".join(f"{k} {v}" for k, v in r["idle_writes_by_kind"].items()) if r["idle_writes"] else "")),
        ("reconciles until every route; their seconds", f"{r['reconciles_until_every_route']}; "
                                                        f"{r['reconcile_s_total']} s"),
        ("slowest reconciles", slowest),
    ]
    return "\n".join([f"# An AdapterPool of {r['adapters']} adapters through the operator, {r['nodes']} nodes x "
                      f"{r['gpus_per_node']} H100", "",
                      f"Load average {r['load_average']} at the end (a shared 2-core machine).", "",
                      "| measure | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=300.0, help="The pool's expected requests/s in all.")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--name", default="adapter_pool_scale", help="Results file name under bench/results.")
    parser.add_argument("--keep-log", type=Path, help="Copy the operator's log here (to see where the time went).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-adapters-") as folder:
        try:
            result = run(args.adapters, args.rate, args.nodes, args.gpus_per_node, Path(folder))
        finally:
            log = Path(folder) / "operator-1.log"
            if args.keep_log and log.exists():
                args.keep_log.write_bytes(log.read_bytes())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
