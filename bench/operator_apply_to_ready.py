"""Operator end to end: time from `kubectl apply` of the three examples to every system Ready.

One command: `.venv/bin/python -P bench/operator_apply_to_ready.py [--nodes 16] [--gpus-per-node 8]`.
It starts the real test cluster (tests/cluster: etcd, kube-apiserver,
controller-manager, scheduler, KWOK), the MIG-manager stand-in with its
configured delays, fake H100 nodes, and `tessera operator` as a subprocess;
applies traffic-analysis, social-media and ar-assistant together and records:

- seconds from apply to all Ready, and the same less the stand-in's
  configured delays (ConfigMap lag + apply time, and the operator's matching
  propagation wait), which a real GPU Operator sets, not tessera;
- the phases as the operator logged them (solve seconds);
- peak resident memory (VmHWM) of the operator process and of its solver worker;
- event-loop stalls from the operator's own metrics (largest, and the histogram).

Results: bench/results/operator_apply_to_ready.{json,md}, and what `kubectl get` and `kubectl
describe` showed at the end in bench/results/operator_kubectl.txt (quoted in docs/operator.md).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kubernetes import client, config  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane, free_port  # noqa: E402
from cluster.gpu_nodes import create_gpu_nodes  # noqa: E402
from cluster.gpu_operator import install_cluster_policy  # noqa: E402
from cluster.kube import ensure_namespace, wait_crd_established, wait_for, wait_node_ready  # noqa: E402
from cluster.mig_manager_standin import MigManagerStandIn  # noqa: E402
from e2e.operator_harness import audit_lines, operator_writes  # noqa: E402

EXAMPLES = ("traffic-analysis", "social-media", "ar-assistant")
RESULTS = REPO / "bench" / "results"
CONFIGMAP_DELAY_S = 1.0
APPLY_S = 0.5
PROPAGATION_S = 1.5
NAMESPACE = "bench"
RESYNC_S = 4.0
"""Short, so that the idle wait after Ready holds a few resyncs, whose writes (from the audit log) are counted."""
IDLE_S = 12.0


def peak_rss_mb(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(found.group(1)) / 1024 if found else 0.0  # a zombie has no memory left


def child_pids(pid: int) -> list[int]:
    """Children of every thread of the process (the solver worker is started from the reconcile thread)."""
    pids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    metrics = {}
    for line in text.splitlines():
        if line.startswith("tessera_event_loop_lag") or line.startswith("tessera_solve_seconds_sum"):
            name, value = line.rsplit(" ", 1)
            metrics[name] = float(value)
    return metrics


def ready(custom: client.CustomObjectsApi) -> bool:
    items = custom.list_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE, "compoundinferencesystems")["items"]
    return len(items) == len(EXAMPLES) and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in (i.get("status") or {}).get("conditions") or [])
        for i in items)


def run(nodes: int, gpus_per_node: int, workdir: Path) -> dict:
    bins = bin_dir()
    cluster = ControlPlane(workdir / "cluster", bins=bins).start()
    standin = None
    operator = None
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        kubectl = [str(bins / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
        subprocess.run([*kubectl, "apply", "-f", str(REPO / "crds")], check=True, capture_output=True)
        wait_crd_established(api, "compoundinferencesystems.tessera.ai")
        ensure_namespace(core, "gpu-operator")
        ensure_namespace(core, NAMESPACE)
        install_cluster_policy(api, "tessera-mig-parted-config")
        standin = MigManagerStandIn(core, configmap_delay=CONFIGMAP_DELAY_S, apply_seconds=APPLY_S).start()
        names = create_gpu_nodes(core, nodes, "NVIDIA-H100-80GB-HBM3", gpus_per_node=gpus_per_node)
        for name in names:
            wait_node_ready(core, name)
        wait_for(lambda: core.list_namespaced_service_account(NAMESPACE).items, 60, "default service account")
        metrics_port = free_port()
        log = open(workdir / "operator.log", "wb")
        operator = subprocess.Popen(
            [sys.executable, "-P", "-m", "tessera", "operator", "--kubeconfig", str(cluster.kubeconfig),
             "--namespace", NAMESPACE, "--mig-config-propagation", str(PROPAGATION_S), "--debounce", "0.3",
             "--resync", str(RESYNC_S),
             "--metrics-port", str(metrics_port), "--health-port", str(free_port())],
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        wait_for(lambda: b"reconciled" in (workdir / "operator.log").read_bytes(), 120, "the operator's first reconcile")
        started = time.monotonic()
        for example in EXAMPLES:
            subprocess.run([*kubectl, "apply", "-n", NAMESPACE, "-f", str(REPO / "examples" / f"{example}.yaml")],
                           check=True, capture_output=True)
        solver_peak = 0.0
        deadline = started + 600
        while not ready(custom):
            if time.monotonic() > deadline or operator.poll() is not None:
                raise RuntimeError("not Ready; see " + str(workdir / "operator.log"))
            for pid in child_pids(operator.pid):
                solver_peak = max(solver_peak, peak_rss_mb(pid))
            time.sleep(0.2)
        to_ready = time.monotonic() - started
        for pid in child_pids(operator.pid):
            solver_peak = max(solver_peak, peak_rss_mb(pid))
        kubectl_views = {
            " ".join(args): subprocess.run([*kubectl, *args], check=True, capture_output=True, text=True).stdout
            for args in (("get", "compoundinferencesystems", "-n", NAMESPACE),
                         ("describe", "compoundinferencesystem", "traffic-analysis", "-n", NAMESPACE),
                         ("get", "deployments,services", "-n", NAMESPACE, "-o", "wide"))}
        idle_from = audit_lines(cluster.audit_log)
        time.sleep(IDLE_S)  # a few idle resyncs, and more reconciles' worth of event-loop samples
        idle_writes = operator_writes(cluster.audit_log, idle_from)
        metrics = scrape(metrics_port)
        text = (workdir / "operator.log").read_text()
        solves = [float(s) for s in re.findall(r"solve of \d+ system\(s\) on \d+ GPUs: .*?\(([\d.]+) s\)\n", text)]
        stand_in_delays = CONFIGMAP_DELAY_S + APPLY_S + PROPAGATION_S
        lag_buckets = {re.search(r'le="([^"]+)"', k).group(1): v for k, v in metrics.items()
                       if k.startswith("tessera_event_loop_lag_seconds_bucket")}
        return {
            "nodes": nodes, "gpus_per_node": gpus_per_node,
            "apply_to_ready_s": round(to_ready, 2),
            "stand_in_configured_delays_s": stand_in_delays,
            "apply_to_ready_less_stand_in_delays_s": round(to_ready - stand_in_delays, 2),
            "solve_s": solves,
            "operator_own_s": round(to_ready - stand_in_delays - sum(solves), 2),
            "stalls_logged": text.count("event loop has not run"),
            "idle_resyncs": int(IDLE_S // RESYNC_S),
            "idle_resync_writes": len(idle_writes),
            "operator_peak_rss_mb": round(peak_rss_mb(operator.pid), 1),
            "solver_worker_peak_rss_mb": round(solver_peak, 1),
            "event_loop_lag_max_s": metrics.get("tessera_event_loop_lag_max_seconds"),
            "event_loop_lag_samples": metrics.get("tessera_event_loop_lag_seconds_count"),
            "event_loop_lag_buckets": lag_buckets,
            "kubectl": kubectl_views,
        }
    finally:
        stop_all(operator, standin, cluster)


def stop_all(operator: subprocess.Popen | None, standin: MigManagerStandIn | None, cluster: ControlPlane) -> None:
    """The operator (given 20 s to exit), then the MIG-manager stand-in, then the test cluster."""
    if operator is not None:
        operator.terminate()
        try:
            operator.wait(timeout=20)
        except subprocess.TimeoutExpired:
            operator.kill()
    if standin is not None:
        standin.stop()
    cluster.stop()


ROWS = [
    ("apply -> all three examples Ready", lambda r: f"{r['apply_to_ready_s']} s"),
    ("same, less the stand-in's configured delays (3 s)", lambda r: f"{r['apply_to_ready_less_stand_in_delays_s']} s"),
    ("solves (worker, as logged; cancelled ones too)", lambda r: ", ".join(f"{s:.1f} s" for s in r["solve_s"])),
    ("the rest: the operator's own time (reads, writes, waits for events)",
     lambda r: f"{r.get('operator_own_s', round(r['apply_to_ready_less_stand_in_delays_s'] - sum(r['solve_s']), 2))} s"),
    ("operator peak RSS", lambda r: f"{r['operator_peak_rss_mb']} MB"),
    ("solver worker peak RSS", lambda r: f"{r['solver_worker_peak_rss_mb']} MB"),
    ("largest event-loop stall", lambda r: f"{1000 * (r['event_loop_lag_max_s'] or 0):.0f} ms"),
    ("event-loop samples (50 ms timer)", lambda r: f"{r['event_loop_lag_samples']:.0f}"),
    ("writes in the idle resyncs after Ready (audit log; Lease renewals not counted)",
     lambda r: f"{r['idle_resync_writes']} in {r['idle_resyncs']} resyncs" if "idle_resync_writes" in r else "n/a"),
    ("stalls over 100 ms logged with stacks (operator/entry/stall_watch.py)", lambda r: f"{r.get('stalls_logged', 'n/a')}"),
]


def markdown(result: dict, baseline: dict | None = None) -> str:
    """The run's numbers; beside a baseline run's (an older operator, same machine, same hour) when given."""
    header = ["| measure | before | after |", "| --- | --- | --- |"] if baseline else ["| measure | value |", "| --- | --- |"]
    rows = [f"| {name} | {value(baseline)} | {value(result)} |" if baseline else f"| {name} | {value(result)} |"
            for name, value in ROWS]
    return "\n".join([f"# Operator: apply to Ready, {result['nodes']} nodes x {result['gpus_per_node']} H100", "",
                      *header, *rows, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--keep-log", type=Path, help="Copy the operator's log here (to see where the time went).")
    parser.add_argument("--name", default="operator_apply_to_ready", help="Results file name under bench/results.")
    parser.add_argument("--baseline", type=Path, help="JSON of a run of an older operator, shown beside this one.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-operator-") as folder:
        try:
            result = run(args.nodes, args.gpus_per_node, Path(folder))
        finally:
            if args.keep_log and (Path(folder) / "operator.log").exists():
                shutil.copy(Path(folder) / "operator.log", args.keep_log)
    RESULTS.mkdir(exist_ok=True)
    views = result.pop("kubectl")
    (RESULTS / "operator_kubectl.txt").write_text("".join(f"$ kubectl {command}\n{text}\n" for command, text in views.items()))
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    (RESULTS / f"{args.name}.md").write_text(markdown(result, baseline))
    print(markdown(result, baseline))


if __name__ == "__main__":
    main()
