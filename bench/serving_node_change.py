"""A demand change touching one serving node: from the demand reading to the new layout serving, sampled.

One command: `nice .venv/bin/python -P bench/serving_node_change.py [--runs 1]`.

The scenario of tests/e2e/test_serving_node_change.py, on the same harness
(tests/cluster: etcd, kube-apiserver, controller-manager, scheduler, KWOK;
the MIG-manager stand-in; `tessera operator` as a subprocess through
tests/e2e/operator_harness.py), with the demand read from a real Prometheus
(Debian's, scraping every second) instead of the spec: two nodes of one H100
each, `riser` (the single-model example) reads its demand from a gauge of
its namespace; the gauge steps from 200 to 12,000 requests/s, past what the
serving node's layout carries, so the plan needs both GPUs and a new layout
on the serving node (`--without-replacement wait`: it changes only once
what it carries runs on the free node).

Timed from the operator's log line of the demand reading that moves the plan
(`system bench/riser: ...`), every phase by its first sample (every ~0.3 s:
the Deployments, both nodes, the pool's stored plan, the pods on the serving
node) or by the operator's log: the re-plan (solve and plan stored), the
replicas on the free node Ready, the cordon, the scale to zero and the pods
gone, the relabel, mig-manager's `success`, the uncordon, the node's new
Deployments available, the system Ready for 12,000. Served capacity per task
is the sum over its Deployments of available replicas x the configuration's
segment throughput (the plans' own figures); the planned capacity is that of
the plan in force (the stored plan at each sample).

The stand-ins' delays are settings (MIG-manager stand-in: ConfigMap lag and
apply time; KWOK: pod start and deletion; Prometheus: scrape interval), as is
the operator's `--mig-config-propagation` wait, which a real cluster sets to
its kubelet's ConfigMap sync; each is reported beside the phase it lengthens.

Results: bench/results/serving_node_change.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import yaml  # noqa: E402
from kubernetes import client, config  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane  # noqa: E402
from cluster.gpu_nodes import MIG_CONFIG, MIG_STATE  # noqa: E402
from cluster.gpu_operator import install_cluster_policy  # noqa: E402
from cluster.kube import ensure_namespace, wait_crd_established, wait_for  # noqa: E402
from cluster.mig_manager_standin import MigManagerStandIn  # noqa: E402
from cluster.prometheus import DemandExporter, Prometheus  # noqa: E402
from e2e.operator_harness import MANAGED, OperatorProcess, make_pool, pinned_node, system_yaml  # noqa: E402

RESULTS = REPO / "bench" / "results"
NAMESPACE = "bench"
SYSTEM = "riser"
BEFORE_RPS, AFTER_RPS = 200.0, 12000.0
GAUGE = "tessera_bench_offered_requests_per_second"
QUERY = f'{GAUGE}{{system="{SYSTEM}"}}'
"""A gauge, so that the step is in one scrape: a counter's rate() would ramp over its window and re-plan at each
reading on the way (the window is the user's query, not the operator's)."""
CORDONED = "tessera.ai/cordoned"
SAMPLE_S = 0.3
TIMEOUT_S = 240
# The stand-ins' settings (the same as the e2e fixtures') and the operator's wait that mirrors one of them.
STANDIN = {"mig_manager_configmap_lag_s": 1.0, "mig_manager_apply_s": 0.5, "prometheus_scrape_s": 1.0,
           "operator_mig_config_propagation_s": 1.5, "operator_demand_poll_s": 1.0}


class OfferedLoad(DemandExporter):
    """The offered request rate per (namespace, system), as a load balancer or a frontend would export it."""

    def collect(self):
        with self._lock:
            gauge = GaugeMetricFamily(GAUGE, "Offered requests/s (the bench's demand).", labels=["namespace", "system"])
            for (namespace, system), rate in sorted(self._rates.items()):
                gauge.add_metric([namespace, system], rate)
        yield gauge


class Sampler(threading.Thread):
    """Every SAMPLE_S: the model-server Deployments, both nodes, the stored plan, the pods on the serving node."""

    def __init__(self, api: client.ApiClient, pool_nodes: list[str], serving: str, state_namespace: str) -> None:
        super().__init__(daemon=True)
        self.apps, self.core = client.AppsV1Api(api), client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.nodes, self.serving, self.state_namespace = pool_nodes, serving, state_namespace
        self.samples: list[dict] = []
        self.plans: dict[str, dict] = {}  # the plan's JSON text -> the plan, every one seen
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append(self.sample())
            self.done.wait(SAMPLE_S)

    def sample(self) -> dict:
        at = time.time()
        deployments = {}
        for d in self.apps.list_namespaced_deployment(NAMESPACE, label_selector=MANAGED).items:
            if d.metadata.labels.get("tessera.ai/component") != "model-server":
                continue
            env = {e.name: e.value for e in d.spec.template.spec.containers[0].env}
            deployments[d.metadata.name] = {
                "task": d.metadata.labels["tessera.ai/task"], "node": pinned_node(d), "replicas": d.spec.replicas,
                "available": d.status.available_replicas or 0, "configuration": configuration_key(
                    env["TESSERA_TASK"], env["TESSERA_VARIANT"], env["TESSERA_MIG_PROFILE"],
                    env["TESSERA_BATCH_SIZE"], env["TESSERA_PROCESSES"])}
        nodes = {}
        for name in self.nodes:
            node = self.core.read_node(name)
            labels, annotations = node.metadata.labels or {}, node.metadata.annotations or {}
            nodes[name] = {"unschedulable": bool(node.spec.unschedulable), "cordoned_for": annotations.get(CORDONED),
                           "config": labels.get(MIG_CONFIG), "state": labels.get(MIG_STATE)}
        stored = [c for c in self.core.list_namespaced_config_map(self.state_namespace).items
                  if c.metadata.name.startswith("tessera-pool-") and (c.data or {}).get("plan")]
        plan_text = stored[0].data["plan"] if stored else None
        if plan_text and plan_text not in self.plans:
            self.plans[plan_text] = json.loads(plan_text)
        pods = self.core.list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={self.serving}").items
        status = self.custom.get_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE,
                                                          "compoundinferencesystems", SYSTEM).get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return {"t": at, "deployments": deployments, "nodes": nodes, "plan": plan_text,
                "pods_on_serving": len(pods), "ready": ready,
                "planned_rps": (status.get("plan") or {}).get("demandRequestsPerSecond")}


def configuration_key(task: str, variant: str, mig_profile: str, batch, processes) -> str:
    return f"{task}/{variant}/{mig_profile}/b{int(batch)}/x{int(processes)}"


def segment_throughputs(plans: dict[str, dict]) -> dict[str, float]:
    """Configuration -> requests/s one replica (one MIG instance) carries, from every plan seen."""
    found = {}
    for plan in plans.values():
        for task in plan["tasks"]:
            for c in task["configs"]:
                key = configuration_key(task["task"], task["variant"], c["segment"]["mig_profile"], c["batch"],
                                        c["segment"]["mps"])
                found[key] = c["segment_throughput_rps"]
    return found


def planned_capacity(plan: dict | None) -> dict[str, float]:
    """Task -> the capacity the plan gives it (replicas x segment throughput)."""
    found: dict[str, float] = {}
    for task in (plan or {}).get("tasks", []):
        found[task["task"]] = found.get(task["task"], 0.0) + sum(c["replicas"] * c["segment_throughput_rps"]
                                                                 for c in task["configs"])
    return found


def served_capacity(sample: dict, throughput: dict[str, float]) -> dict[str, float]:
    found: dict[str, float] = {}
    for d in sample["deployments"].values():
        found[d["task"]] = found.get(d["task"], 0.0) + d["available"] * throughput[d["configuration"]]
    return found


def log_events(log: Path) -> list[tuple[float, str]]:
    """(wall time, message) of each line of the operator's log (tessera.logs.FORMAT, local time)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: (.*)", line)
        if match:
            found.append((datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), match.group(2)))
    return found


def first_log(events: list[tuple[float, str]], pattern: str, after: float) -> tuple[float, str] | None:
    return next(((t, m) for t, m in events if t >= after and re.search(pattern, m)), None)


def first_sample(samples: list[dict], after: float, predicate) -> float | None:
    return next((s["t"] for s in samples if s["t"] >= after and predicate(s)), None)


def prometheus_first_sample(prom: Prometheus, after: float) -> float | None:
    """The timestamp of the first scrape that holds the new rate (its raw samples, over the last minutes)."""
    (series,) = prom.query(f"{QUERY}[10m]") or [{"values": []}]
    return next((float(t) for t, v in series["values"] if float(t) >= after - 1 and float(v) == AFTER_RPS), None)


def run_once(workdir: Path) -> dict:
    cluster = ControlPlane(workdir / "cluster", bins=bin_dir()).start()
    exporter = OfferedLoad().start()
    prom = Prometheus(workdir / "prometheus", {"offered": exporter.address}).start()
    standin = operator = sampler = None
    stepped = time.time()
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        custom = client.CustomObjectsApi(api)
        subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f",
                        str(REPO / "crds")], check=True, capture_output=True)
        wait_crd_established(api, "compoundinferencesystems.tessera.ai")
        ensure_namespace(core, "gpu-operator")
        ensure_namespace(core, NAMESPACE)
        install_cluster_policy(api, "tessera-mig-parted-config")
        standin = MigManagerStandIn(core, configmap_delay=STANDIN["mig_manager_configmap_lag_s"],
                                    apply_seconds=STANDIN["mig_manager_apply_s"]).start()
        pool = make_pool(core, 2, gpus_per_node=1)
        wait_for(lambda: core.list_namespaced_service_account(NAMESPACE).items, 60, "default service account")
        exporter.set_rate((NAMESPACE, SYSTEM), BEFORE_RPS)
        prom.wait_for(QUERY, timeout=60)
        operator = OperatorProcess(cluster.kubeconfig, workdir, NAMESPACE, pool, f"tessera-{pool.id}", extra_args=[
            "--without-replacement", "wait", "--prometheus-url", prom.url,
            "--demand-poll", str(STANDIN["operator_demand_poll_s"])])
        operator.start()
        document = yaml.safe_load(system_yaml(SYSTEM, demandRequestsPerSecond=int(BEFORE_RPS)))
        document["spec"]["demandSource"] = {"query": QUERY}
        custom.create_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE, "compoundinferencesystems",
                                               document)

        def ready_for(rps: float) -> bool:
            if not operator.alive():
                raise RuntimeError(f"operator exited:\n{operator.log_text()}")
            status = custom.get_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE,
                                                         "compoundinferencesystems", SYSTEM).get("status") or {}
            return ((status.get("plan") or {}).get("demandRequestsPerSecond") == rps
                    and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []))
        wait_for(lambda: ready_for(BEFORE_RPS), TIMEOUT_S, f"{SYSTEM} Ready for {BEFORE_RPS:.0f} requests/s")
        (serving,) = {pinned_node(d) for d in apps.list_namespaced_deployment(NAMESPACE, label_selector=MANAGED).items
                      if d.metadata.labels.get("tessera.ai/component") == "model-server"}
        (free,) = set(pool.nodes) - {serving}
        time.sleep(3)  # a quiet start: the first samples show the plan in force, all available

        sampler = Sampler(api, pool.nodes, serving, operator.state_namespace)
        sampler.start()
        time.sleep(2)
        stepped = time.time()
        exporter.set_rate((NAMESPACE, SYSTEM), AFTER_RPS)

        def new_layout_serves() -> bool:
            last = sampler.samples[-1] if sampler.samples else None
            return bool(last and ready_for(AFTER_RPS) and last["nodes"][serving]["config"] != first_config
                        and not last["nodes"][serving]["unschedulable"]
                        and any(d["node"] == serving and d["available"] == d["replicas"] > 0
                                for d in last["deployments"].values()))
        first_config = sampler.samples[0]["nodes"][serving]["config"]
        wait_for(new_layout_serves, TIMEOUT_S, "the serving node's new layout serving", interval=0.3)
        time.sleep(3)  # a few samples of the end state
    finally:
        if sampler is not None:
            sampler.done.set()
            sampler.join(timeout=10)
        log_text = operator.log.read_text(errors="replace") if operator is not None else ""
        scraped = None
        if sampler is not None:
            try:
                scraped = prometheus_first_sample(prom, stepped)
            except (OSError, RuntimeError, ValueError):
                scraped = None
        if operator is not None:
            operator.stop()
        if standin is not None:
            standin.stop()
        prom.stop()
        exporter.stop()
        cluster.stop()
    (workdir / "operator.log").write_text(log_text)
    return analyse(sampler, log_events(workdir / "operator.log"), stepped, scraped, serving, free, first_config)


def analyse(sampler: Sampler, events: list[tuple[float, str]], stepped: float, scraped: float | None,
            serving: str, free: str, first_config: str) -> dict:
    samples = sampler.samples
    read = first_log(events, rf"system {NAMESPACE}/{SYSTEM}: ", stepped)
    if read is None:
        raise RuntimeError("the operator logged no demand move after the step")
    t0 = read[0]
    old_plan = samples[0]["plan"]

    def serving_deployments(s: dict) -> list[dict]:
        return [d for d in s["deployments"].values() if d["node"] == serving]

    def free_deployments(s: dict) -> list[dict]:
        return [d for d in s["deployments"].values() if d["node"] == free]

    solved = first_log(events, r"pool .*: solve of \d+ system", t0)
    resized = first_log(events, r"replicas-only re-solve", t0)
    phases = {
        "demand in Prometheus (first scrape of the new rate)": scraped,
        "demand read by the operator (its log)": t0,
        "re-plan solved (its log)": solved[0] if solved else None,
        "re-plan stored (the pool's ConfigMap)": first_sample(samples, stepped, lambda s: s["plan"] != old_plan),
        "replicas on the free node Ready": first_sample(samples, stepped, lambda s: (ds := free_deployments(s))
                                                        and all(d["available"] == d["replicas"] > 0 for d in ds)),
        "serving node cordoned by tessera": first_sample(samples, stepped,
                                                         lambda s: s["nodes"][serving]["cordoned_for"] is not None),
        "its Deployments scaled to zero": first_sample(samples, stepped, lambda s: (ds := serving_deployments(s))
                                                       and all(d["replicas"] == 0 for d in ds)),
        "its pods gone": first_sample(samples, stepped, lambda s: s["nodes"][serving]["cordoned_for"] is not None
                                      and s["pods_on_serving"] == 0),
        "relabelled (new MIG config)": first_sample(samples, stepped,
                                                    lambda s: s["nodes"][serving]["config"] != first_config),
        "mig-manager success": first_sample(samples, stepped, lambda s: s["nodes"][serving]["config"] != first_config
                                            and s["nodes"][serving]["state"] == "success"),
        "uncordoned": first_sample(samples, stepped, lambda s: s["nodes"][serving]["config"] != first_config
                                   and not s["nodes"][serving]["unschedulable"]),
        "new Deployments on the node available": first_sample(
            samples, stepped, lambda s: s["nodes"][serving]["config"] != first_config
            and (ds := serving_deployments(s)) and all(d["available"] == d["replicas"] > 0 for d in ds)),
        "system Ready for the new demand": first_sample(samples, stepped,
                                                        lambda s: s["ready"] and s["planned_rps"] == AFTER_RPS),
    }
    throughput = segment_throughputs(sampler.plans)
    before = planned_capacity(sampler.plans[old_plan])
    series = []
    for s in samples:
        served = served_capacity(s, throughput)
        planned = planned_capacity(sampler.plans.get(s["plan"]))
        series.append({"t": round(s["t"] - t0, 2), "served": served, "planned": planned,
                       "demand": BEFORE_RPS if s["t"] < stepped else AFTER_RPS})
    after = series[-1]["planned"]
    during = [p for p in series if p["t"] >= 0]
    floor_held = all(p["served"].get(task, 0) >= capacity - 1e-6 for p in during for task, capacity in before.items())
    return {
        "pool": "2 nodes x 1 H100 (KWOK), --without-replacement wait",
        "demand_rps": [BEFORE_RPS, AFTER_RPS],
        "phases_s_from_demand_read": {name: (round(t - t0, 2) if t is not None else None)
                                      for name, t in phases.items()},
        "demand_read_to_new_layout_serving_s": _since(phases["new Deployments on the node available"], t0),
        "step_to_demand_read_s": round(t0 - stepped, 2),
        "solve_log": [found[1] for found in (resized, solved) if found],
        "capacity_before_rps": before, "capacity_after_rps": after,
        "min_served_during_change_rps": {task: min(p["served"].get(task, 0.0) for p in during) for task in before},
        "never_below_the_capacity_in_force_when_demand_rose": floor_held,
        "sample_interval_s": round(statistics.median(b["t"] - a["t"] for a, b in zip(samples, samples[1:])), 2),
        "samples": len(samples),
        "settings": STANDIN,
        "series": series,
    }


def _since(t: float | None, t0: float) -> float | None:
    return round(t - t0, 2) if t is not None else None


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["series"]
    tasks = sorted({task for p in series for task in p["served"]} | set(result["capacity_before_rps"]))
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for task in tasks:
        ts = [p["t"] for p in series]
        ax.step(ts, [p["planned"].get(task, 0) for p in series], where="post", ls="--", label=f"{task}: planned")
        ax.step(ts, [p["served"].get(task, 0) for p in series], where="post", lw=2, label=f"{task}: served (available)")
        ax.axhline(result["capacity_before_rps"][task], color="grey", lw=0.8, ls=":",
                   label=f"{task}: capacity in force when demand rose")
    ax.step([p["t"] for p in series], [p["demand"] for p in series], where="post", color="black", lw=0.8,
            label="demand (offered at the exporter)")
    for i, (name, t) in enumerate(result["phases_s_from_demand_read"].items()):
        if t is None:
            continue
        ax.axvline(t, color="tab:red", lw=0.5, alpha=0.6)
        ax.text(t, ax.get_ylim()[1] * (0.97 - 0.055 * (i % 13)), f" {name}", fontsize=6.5, color="tab:red",
                va="top")
    ax.set_xlabel("seconds from the operator's demand reading")
    ax.set_ylabel("requests/s")
    ax.set_title("A demand change touching one serving node: served capacity, sampled every ~0.3 s")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def markdown(runs: list[dict]) -> str:
    lines = ["# A demand change touching one serving node (bench/serving_node_change.py)", "",
             f"{runs[0]['pool']}; demand {runs[0]['demand_rps'][0]:.0f} -> {runs[0]['demand_rps'][1]:.0f} requests/s "
             "from a Prometheus gauge. Seconds from the operator's log line of the demand reading.", "",
             "| phase | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |",
             "| --- |" + " --- |" * len(runs)]
    for name in runs[0]["phases_s_from_demand_read"]:
        lines.append(f"| {name} | " + " | ".join(_s(r["phases_s_from_demand_read"][name]) for r in runs) + " |")
    rows = [("demand read -> new layout serving", lambda r: _s(r["demand_read_to_new_layout_serving_s"])),
            ("step at the exporter -> demand read", lambda r: _s(r["step_to_demand_read_s"])),
            ("capacity in force when demand rose (rps)", lambda r: _rps(r["capacity_before_rps"])),
            ("lowest served capacity during the change (rps)", lambda r: _rps(r["min_served_during_change_rps"])),
            ("capacity of the new plan (rps)", lambda r: _rps(r["capacity_after_rps"])),
            ("never below the capacity in force", lambda r: str(r["never_below_the_capacity_in_force_when_demand_rose"])),
            ("samples (median interval)", lambda r: f"{r['samples']} ({r['sample_interval_s']} s)")]
    lines += [f"| {name} | " + " | ".join(value(r) for r in runs) + " |" for name, value in rows]
    lines += ["", "Settings (the stand-ins' and the operator's waits that mirror them): "
              + ", ".join(f"{k} {v}" for k, v in runs[0]["settings"].items()), ""]
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _rps(by_task: dict[str, float]) -> str:
    return ", ".join(f"{task} {value:.0f}" for task, value in sorted(by_task.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep-log", type=Path, help="Copy the operator's log of the last run here.")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="tessera-bench-serving-node-") as folder:
            try:
                runs.append(run_once(Path(folder)))
            finally:
                if args.keep_log and (Path(folder) / "operator.log").exists():
                    args.keep_log.write_text((Path(folder) / "operator.log").read_text())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serving_node_change.json").write_text(json.dumps(runs, indent=1) + "\n")
    (RESULTS / "serving_node_change.md").write_text(markdown(runs))
    plot(runs[-1], RESULTS / "serving_node_change.png")
    print(markdown(runs))


if __name__ == "__main__":
    main()
