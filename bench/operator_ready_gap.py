"""Where the last seconds of apply -> Ready go at 20 systems: the cluster's or the operator's (issue 29).

One command: `nice .venv/bin/python -P bench/operator_ready_gap.py [--controller-manager-qps Q] [--name N]`
(about 95 s). It runs the scenario of bench/operator_many_systems.py (20 copies of the examples on 16 fake
nodes x 8 H100, the real test cluster, the MIG-manager stand-in, `tessera operator` as a subprocess; no edits)
and, from the stand-in's start until the cluster stops, watches the bench namespace's Deployments, Pods and
systems, stamping every event with this machine's clock (the API's own timestamps have whole seconds only).
With the operator's log (its lines are stamped by the same clock) it builds, per system:

- apply -> its first Deployment created (the operator: solve, plan, statuses, children);
- Deployment created -> the last of its pods scheduled -> the last pod Ready (KWOK) -> the last of the
  system's Deployments Available (controller-manager): the cluster's part;
- the last Deployment Available -> the system's Ready condition True: the operator's part (the event's
  debounce, the reconciles queued before it, the status write).

With --controller-manager-qps the test cluster's kube-controller-manager runs with that client rate limit
instead of its default (20 requests a second, burst 30), to see how much of the cluster's part is that limit.

Results (--name, default operator_ready_gap): bench/results/NAME.{json,md}, the operator's log NAME.log and
every watched event (seconds from apply) in NAME_events.jsonl.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import operator_many_systems as many  # noqa: E402
from kubernetes import client, watch  # noqa: E402

from cluster.controlplane import ControlPlane  # noqa: E402

NODES, SYSTEMS = 16, 20
SYSTEM_LABEL = "tessera.ai/system"
RECONCILED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO tessera\.operator: "
                        r"reconciled \((.*?)\) in ([\d.]+) s: (\d+) write", re.MULTILINE)


class Watches:
    """Every event of the bench namespace's Deployments, Pods and systems, stamped with time.time()."""

    def __init__(self, api: client.ApiClient) -> None:
        self.events: list[dict] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        apps, core, custom = client.AppsV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
        lists = {
            "deployment": lambda **kw: apps.list_namespaced_deployment(many.NAMESPACE, **kw),
            "pod": lambda **kw: core.list_namespaced_pod(many.NAMESPACE, **kw),
            "system": lambda **kw: custom.list_namespaced_custom_object("tessera.ai", "v1alpha1", many.NAMESPACE,
                                                                        "compoundinferencesystems", **kw),
        }
        for kind, lister in lists.items():
            threading.Thread(target=self._watch, args=(kind, lister), daemon=True).start()

    def _watch(self, kind: str, lister) -> None:
        try:
            for event in watch.Watch().stream(lister, _request_timeout=900):
                stamp = time.time()
                body = event["object"]
                body = body if isinstance(body, dict) else body.to_dict()
                with self.lock:
                    self.events.append({"t": stamp, "kind": kind, "type": event["type"], **summary(kind, body)})
        except Exception as error:  # the cluster stopped under the watch (or a bug: kept in the results)
            self.errors.append(f"{kind}: {error!r}")


def summary(kind: str, body: dict) -> dict:
    meta = body["metadata"]
    labels = meta.get("labels") or {}
    status = body.get("status") or {}
    if kind == "system":
        conditions = status.get("conditions") or []
        return {"name": meta["name"], "system": meta["name"],
                "ready": any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)}
    if kind == "deployment":
        wanted = (body.get("spec") or {}).get("replicas")
        available = either(status, "available_replicas", "availableReplicas") or 0
        return {"name": meta["name"], "system": labels.get(SYSTEM_LABEL), "replicas": wanted,
                "available": wanted is not None and available >= wanted
                and (either(status, "observed_generation", "observedGeneration") or 0) >= (meta.get("generation") or 0)}
    conditions = status.get("conditions") or []
    return {"name": meta["name"], "system": labels.get(SYSTEM_LABEL),
            "scheduled": bool(either(body.get("spec") or {}, "node_name", "nodeName")),
            "ready": any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)}


def either(fields: dict, snake: str, camel: str):
    """A field of a watched object: snake_case where the client made a model of it, camelCase where it passed
    the JSON through."""
    return fields.get(snake, fields.get(camel))


def first(events: list[dict], test) -> float | None:
    return next((e["t"] for e in events if test(e)), None)


def per_system(events: list[dict], applied: float) -> list[dict]:
    """Each system's steps in seconds from apply: the last object of each kind reaching each state."""
    rows = []
    for name in sorted({e["system"] for e in events if e["kind"] == "system"}):
        mine = [e for e in events if e["system"] == name]
        deployments = sorted({e["name"] for e in mine if e["kind"] == "deployment"})
        pods = sorted({e["name"] for e in mine if e["kind"] == "pod"})
        created = [first(mine, lambda e, d=d: e["kind"] == "deployment" and e["name"] == d) for d in deployments]
        available = [first(mine, lambda e, d=d: e["kind"] == "deployment" and e["name"] == d and e["available"])
                     for d in deployments]
        scheduled = [first(mine, lambda e, p=p: e["kind"] == "pod" and e["name"] == p and e["scheduled"]) for p in pods]
        pod_ready = [first(mine, lambda e, p=p: e["kind"] == "pod" and e["name"] == p and e["ready"]) for p in pods]
        ready = first(mine, lambda e: e["kind"] == "system" and e["ready"])
        if not deployments or None in available or ready is None:
            rows.append({"system": name, "complete": False})
            continue
        rows.append({
            "system": name, "complete": True, "deployments": len(deployments), "pods": len(pods),
            "first_deployment_created": min(created) - applied, "last_deployment_created": max(created) - applied,
            "last_pod_scheduled": max(t for t in scheduled if t) - applied if any(scheduled) else None,
            "last_pod_ready": max(t for t in pod_ready if t) - applied if any(pod_ready) else None,
            "last_deployment_available": max(available) - applied,
            "ready": ready - applied,
        })
    return rows


def reconciles(log: str, applied: float) -> list[dict]:
    """The operator's reconciles as logged: start and end in seconds from apply, kinds, writes."""
    found = []
    for stamp, kinds, seconds, writes in RECONCILED.findall(log):
        end = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() - applied
        found.append({"start": round(end - float(seconds), 2), "end": round(end, 2), "kinds": kinds,
                      "writes": int(writes)})
    return [r for r in found if r["end"] > 0]


def raise_controller_manager_qps(qps: int) -> None:
    """The test cluster's kube-controller-manager with --kube-api-qps `qps` (its default: 20, burst 30), for
    this process's clusters."""
    spawn = ControlPlane._spawn

    def spawned(self, name, args, env=None):
        if name == "kube-controller-manager":
            args = [*args, f"--kube-api-qps={qps}", f"--kube-api-burst={2 * qps}"]
        return spawn(self, name, args, env)
    ControlPlane._spawn = spawned


def run_retrying_crd_wait(workdir: Path) -> dict:
    """The scenario, started again where `kubectl wait` read the new CRD before it had any status (a race in the
    bench's start-up, seen twice in five starts here)."""
    for attempt in range(3):
        try:
            return many.run(NODES, SYSTEMS, None, workdir / str(attempt), 0.0)
        except RuntimeError as error:
            if "status.conditions accessor error" not in str(error) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def run(name: str) -> dict:
    state: dict = {}
    standin_class, stop_all, documents = many.MigManagerStandIn, many.stop_all, many.system_documents

    def standin(core, **kwargs):  # the first hook with a client of the cluster: start watching
        state["watches"] = Watches(core.api_client)
        return standin_class(core, **kwargs)

    def applied_now(count, distinct=False):  # called right before `kubectl apply` of the systems
        state["applied"] = time.time()
        return documents(count, distinct)

    def stopping(operator, standin_, cluster):
        if "watches" in state:  # not when start-up failed
            time.sleep(1.0)  # the last events in flight
            state["events"] = list(state["watches"].events)
            state["errors"] = list(state["watches"].errors)
        stop_all(operator, standin_, cluster)

    many.MigManagerStandIn, many.stop_all, many.system_documents = standin, stopping, applied_now
    with tempfile.TemporaryDirectory(prefix="tessera-ready-gap-") as folder:
        workdir = Path(folder)
        result = run_retrying_crd_wait(workdir)
        log_path = max(workdir.glob("*/operator.log"))
        shutil.copy(log_path, many.RESULTS / f"{name}.log")
        log = log_path.read_text(errors="replace")
    applied = state["applied"]
    rows = per_system(state["events"], applied)
    (many.RESULTS / f"{name}_events.jsonl").write_text(
        "\n".join(json.dumps({**e, "t": round(e["t"] - applied, 3)}) for e in state["events"]) + "\n")
    return {"apply_to_ready_s": result["apply_to_ready_s"], "solve_s": result["solve_s"],
            "load_average": result["load_average"], "watch_errors": state["errors"], "events": len(state["events"]),
            "systems": rows, "reconciles": reconciles(log, applied)}


STEPS = [
    ("apply -> first Deployment created", None, "first_deployment_created"),
    ("first -> last Deployment created", "first_deployment_created", "last_deployment_created"),
    ("last Deployment created -> last pod scheduled", "last_deployment_created", "last_pod_scheduled"),
    ("last pod scheduled -> last pod Ready (KWOK)", "last_pod_scheduled", "last_pod_ready"),
    ("last pod Ready -> last Deployment Available", "last_pod_ready", "last_deployment_available"),
    ("last Deployment Available -> system Ready", "last_deployment_available", "ready"),
]


def markdown(result: dict) -> str:
    rows = [r for r in result["systems"] if r["complete"]]
    lines = [f"# Where apply -> Ready goes at {SYSTEMS} systems on {NODES} nodes (issue 29)", "",
             f"kube-controller-manager --kube-api-qps {result['controller_manager_qps']}; "
             f"apply -> all Ready {result['apply_to_ready_s']} s; solves {result['solve_s']} s; load average at Ready "
             f"{result['load_average']}; {len(rows)} of {len(result['systems'])} systems with every step seen.", "",
             "Per system, seconds (median / min / max over the systems):", "",
             "| step | median | min | max |", "| --- | --- | --- | --- |"]
    for label, start, end in STEPS:
        spans = [r[end] - (r[start] if start else 0.0) for r in rows if r.get(end) is not None
                 and (start is None or r.get(start) is not None)]
        if spans:
            lines.append(f"| {label} | {statistics.median(spans):.2f} | {min(spans):.2f} | {max(spans):.2f} |")
    lines += ["", "Each system (seconds from apply):", "",
              "| system | deployments | pods | first Deployment | last Deployment | last pod scheduled "
              "| last pod Ready | last Deployment Available | Ready |", "| --- |" + " --- |" * 8]
    for r in sorted(rows, key=lambda r: r["ready"]):
        lines.append(f"| {r['system']} | {r['deployments']} | {r['pods']} | {r['first_deployment_created']:.2f} | "
                     f"{r['last_deployment_created']:.2f} | {fmt(r['last_pod_scheduled'])} | "
                     f"{fmt(r['last_pod_ready'])} | {r['last_deployment_available']:.2f} | {r['ready']:.2f} |")
    lines += ["", "The operator's reconciles after apply (seconds from apply, as logged):", "",
              "| start | end | kinds | writes |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['start']:.2f} | {r['end']:.2f} | {r['kinds']} | {r['writes']} |" for r in result["reconciles"]]
    return "\n".join(lines) + "\n"


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="operator_ready_gap", help="Results file name under bench/results.")
    parser.add_argument("--controller-manager-qps", type=int,
                        help="Run the test cluster's kube-controller-manager with this --kube-api-qps (burst twice "
                             "it) instead of its default 20 (burst 30).")
    args = parser.parse_args()
    if args.controller_manager_qps:
        raise_controller_manager_qps(args.controller_manager_qps)
    many.RESULTS.mkdir(exist_ok=True)
    result = {"controller_manager_qps": args.controller_manager_qps or 20, **run(args.name)}
    (many.RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (many.RESULTS / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
