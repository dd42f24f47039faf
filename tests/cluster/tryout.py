"""The local try-out (`bash scripts/try.sh`): tessera installed with its chart, planning the examples.

On the test cluster (a real control plane; KWOK's fake nodes, which run no
containers): 4 fake H100 nodes with 8 GPUs each, labelled as GPU feature
discovery does, the GPU Operator's namespace and ClusterPolicy, and the
MIG-manager stand-in, which partitions the fake GPUs as mig-manager would.
Then, as docs/install.md writes it: `helm install` of charts/tessera, and the
operator run out of cluster from the chart's rendered Deployment with a token
of the chart's ServiceAccount (its pod cannot run on KWOK), the three
examples applied, and `kubectl get cis` and each system's plan printed.
Ctrl-C stops everything it started.

    python -P -m cluster.tryout DIR     # with tests/ on PYTHONPATH; DIR holds the cluster's files
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client, config

from .chart_operator import HostOperator, token_kubeconfig
from .controlplane import ControlPlane, free_port
from .gpu_nodes import create_cpu_node, create_gpu_nodes
from .gpu_operator import install_cluster_policy
from .kube import ensure_namespace, wait_for, wait_node_ready
from .mig_manager_standin import MigManagerStandIn

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA-H100-80GB-HBM3"
POOL = ("tessera.ai/pool", "h100")
RELEASE, NAMESPACE, WORKLOADS = "tessera", "tessera-system", "inference"
EXAMPLES = ("traffic-analysis.yaml", "social-media.yaml", "ar-assistant.yaml")
READY_TIMEOUT_S = 300


def say(text: str) -> None:
    print(f"[try] {text}", file=sys.stderr, flush=True)


def values(workdir: Path) -> Path:
    """The chart's values for the try-out. The operator runs on this host, so its ports must be free here;
    the stand-in applies a MIG config 1 s after it is written, not mig-manager's 90 s default wait."""
    path = workdir / "values.json"
    path.write_text(json.dumps({
        "poolNodeSelector": {POOL[0]: POOL[1]},
        "gpuOperator": {"migConfigPropagationSeconds": 2},
        "health": {"port": free_port()},
        "metrics": {"port": free_port()},
    }))
    return path


def plan_lines(system: dict) -> list[str]:
    plan = (system.get("status") or {}).get("plan") or {}
    lines = [f"{system['metadata']['name']}: {plan.get('gpus')} GPU(s), {plan.get('slices')} slices of "
             f"{plan.get('gpuProduct')}, accuracy {plan.get('predictedAccuracy')}, "
             f"latency {plan.get('predictedLatencyMilliseconds')} ms"]
    for task in plan.get("tasks", []):
        configurations = ", ".join(
            f"{c['replicas']} x {c['migProfile']}" + (f" x{c['mpsDegree']} MPS" if c["mpsDegree"] > 1 else "")
            + f" batch {c['batchSize']}" for c in task["configurations"])
        lines.append(f"  {task['name']:<20} {task['variant']:<16} {configurations}")
    return lines


def run(workdir: Path) -> int:
    bins = Path(os.environ["TESSERA_CLUSTER_BIN"])
    env = {**os.environ, "KUBECONFIG": str(workdir / "kubeconfig"), "HELM_CONFIG_HOME": str(workdir / "helm"),
           "HELM_CACHE_HOME": str(workdir / "helm"), "HELM_DATA_HOME": str(workdir / "helm")}

    def tool(*args: str, echo: bool = True) -> str:
        if echo:
            print(f"$ {' '.join(args)}", flush=True)
        done = subprocess.run([str(bins / args[0]), *args[1:]], env=env, text=True, capture_output=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"[try] {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    say(f"starting the test cluster in {workdir}")
    cluster = ControlPlane(workdir, bins=bins).start()
    operator = standin = None
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        nodes = create_gpu_nodes(core, 4, H100, gpus_per_node=8, name_prefix="h100")
        for node in nodes:
            core.patch_node(node, {"metadata": {"labels": dict([POOL])}})
        create_cpu_node(core)  # for the operator's own pod (it runs no container there)
        for node in [*nodes, "cpu-0"]:
            wait_node_ready(core, node)
        ensure_namespace(core, "gpu-operator")
        install_cluster_policy(api, "tessera-mig-parted-config")
        standin = MigManagerStandIn(core, namespace="gpu-operator", configmap_delay=1.0).start()
        say("4 fake H100 nodes (8 GPUs each), the GPU Operator's ClusterPolicy and the MIG-manager stand-in are up")

        print(tool("helm", "install", RELEASE, str(REPO / "charts" / "tessera"), "-n", NAMESPACE, "--create-namespace",
                   "--atomic", "-f", str(values(workdir))), flush=True)
        manifest = tool("helm", "get", "manifest", RELEASE, "-n", NAMESPACE, echo=False)
        (deployment,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment"]
        service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        kubeconfig = token_kubeconfig(core, cluster, NAMESPACE, service_account, workdir / "operator.kubeconfig")
        operator = HostOperator(deployment, kubeconfig, workdir, "tessera-operator").start()
        say(f"the operator runs on this host as the chart's ServiceAccount {service_account} (log: {operator.log})")

        tool("kubectl", "create", "namespace", WORKLOADS)
        for example in EXAMPLES:
            tool("kubectl", "apply", "-n", WORKLOADS, "-f", str(REPO / "examples" / example))
        custom = client.CustomObjectsApi(api)

        def ready() -> list[dict] | None:
            if not operator.alive():
                raise SystemExit(f"[try] the operator exited:\n{operator.text()[-4000:]}")
            found = custom.list_namespaced_custom_object("tessera.ai", "v1alpha1", WORKLOADS,
                                                         "compoundinferencesystems")["items"]
            done = [s for s in found if (s.get("status") or {}).get("phase") in ("Ready", "Degraded")]
            return found if len(done) == len(EXAMPLES) else None
        started = time.monotonic()
        found = wait_for(ready, READY_TIMEOUT_S, "the three systems Ready", interval=1.0)
        say(f"Ready {time.monotonic() - started:.0f} s after kubectl apply")
        print(tool("kubectl", "get", "cis", "-n", WORKLOADS), flush=True)
        print("\n".join(line for system in sorted(found, key=lambda s: s["metadata"]["name"])
                        for line in plan_lines(system)), flush=True)
        print(tool("kubectl", "get", "nodes", "-l", "=".join(POOL), "-L", "nvidia.com/mig.config"), flush=True)
        if os.environ.get("TESSERA_TRY_EXIT"):  # for a scripted run (the README's output)
            return 0
        say(f"poke it: export KUBECONFIG={cluster.kubeconfig}; {bins}/kubectl describe cis -n {WORKLOADS}. "
            "Ctrl-C stops the operator, the stand-in and the cluster.")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    finally:
        if operator is not None:
            operator.stop()
        if standin is not None:
            standin.stop()
        cluster.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1]).resolve()))
