"""The operator's writes one at a time (before) beside four at a time (after, act.py), on a real test cluster (issue 29).

One command: `nice .venv/bin/python -P bench/operator_write_batches.py [--children 130] [--rounds 3]` (about two
minutes). Starts the test cluster (tests/cluster) and, through the operator's own Actor and Cluster (server-side
apply under tessera's field manager), applies `--children` children as a reconcile that applies 20 systems'
children does: Services, then Deployments (pinned to a node that does not exist, so no pod runs), then their
PodDisruptionBudgets, each a new object, then the same again changed (a label) so each write is a real update.
Before: each action applied alone (`Actor.apply_one`, the old loop); after: `Actor.apply` (write_batches).
Before and after alternate, `--rounds` times each, on the same cluster. Prints and writes
bench/results/operator_write_batches.md: seconds per round, the median ratio, the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kubernetes import client, config  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane  # noqa: E402
from cluster.kube import ensure_namespace  # noqa: E402
from tessera.operator.cluster import Cluster  # noqa: E402
from tessera.operator.fetcher import FetcherClient  # noqa: E402
from tessera.operator.reconcile.act import Actor  # noqa: E402
from tessera.operator.reconcile.actions import ApplyChild  # noqa: E402
from tessera.operator.settings import OperatorSettings  # noqa: E402
from tessera.operator.vllm import VllmClient  # noqa: E402

NAMESPACE = "bench"


def children(count: int, round_name: str, generation: int) -> list[ApplyChild]:
    """A third each of Services, Deployments and their budgets, in the order a reconcile applies them."""
    third = count // 3
    labels = {"app.kubernetes.io/managed-by": "tessera", "bench/generation": str(generation)}
    names = [f"{round_name}-server-{i}" for i in range(third)]
    services = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": n, "namespace": NAMESPACE, "labels": labels},
                 "spec": {"selector": {"app": n}, "ports": [{"port": 8000, "targetPort": 8000}]}} for n in names]
    deployments = [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": n, "namespace": NAMESPACE, "labels": labels},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": n}},
                             "template": {"metadata": {"labels": {"app": n}},
                                          "spec": {"nodeSelector": {"kubernetes.io/hostname": "no-such-node"},
                                                   "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.3",
                                                                   "args": ["--model", "x", "--port", "8000"],
                                                                   "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}}}}
                   for n in names]
    budgets = [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": n, "namespace": NAMESPACE, "labels": labels},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": n}}}} for n in names]
    return [ApplyChild(body, reason="bench") for body in [*services, *deployments, *budgets]]


def one_round(actor: Actor, batched: bool, actions: list[ApplyChild]) -> float:
    started = time.perf_counter()
    if batched:
        actor.apply(actions)
    else:
        for action in actions:
            actor.apply_one(action)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=130)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-writes-") as folder:
        cluster = ControlPlane(Path(folder) / "cluster", bins=bin_dir()).start()
        try:
            api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
            ensure_namespace(client.CoreV1Api(api), NAMESPACE)
            actor = Actor(Cluster(api, OperatorSettings()), VllmClient(5.0), FetcherClient(5.0))
            times: dict[str, list[float]] = {"one at a time": [], "batched": []}
            loads = []
            for round_number in range(args.rounds):
                for label, batched in (("one at a time", False), ("batched", True)):
                    name = f"r{round_number}-{'b' if batched else 's'}"
                    loads.append(os.getloadavg()[0])
                    created = one_round(actor, batched, children(args.children, name, 1))
                    updated = one_round(actor, batched, children(args.children, name, 2))
                    times[label] += [created, updated]
                    print(f"{label}: {args.children} created {created:.2f} s, updated {updated:.2f} s", flush=True)
            actor.stop()
        finally:
            cluster.stop()
    before, after = statistics.median(times["one at a time"]), statistics.median(times["batched"])
    text = "\n".join([
        "# The operator's writes: one at a time beside batched (bench/operator_write_batches.py)", "",
        f"{args.children // 3 * 3} children (Services, Deployments, budgets), created then updated, {args.rounds} rounds "
        f"each, alternating, one test cluster; load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores.",
        "", "| writes | each round (created, updated), s | median s |", "| --- | --- | --- |",
        *(f"| {label} | {', '.join(f'{t:.2f}' for t in spent)} | {statistics.median(spent):.2f} |"
          for label, spent in times.items()),
        "", f"Batched / one at a time (medians): {after / before:.2f}", ""])
    (REPO / "bench" / "results" / "operator_write_batches.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
