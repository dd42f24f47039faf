"""Runs `tessera operator` as a real subprocess against the test cluster, and reads back what it made.

Every test gets its own GPU nodes (labelled with a pool id the operator is
told to select), its own namespace and its own state namespace, so tests do
not see each other's pools, plans or children.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from cluster.controlplane import die_with_parent_prefix, free_port
from cluster.gpu_nodes import create_gpu_nodes, gpu_states
from cluster.kube import ensure_namespace, wait_for, wait_node_ready

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
THREE_EXAMPLES = ("traffic-analysis.yaml", "social-media.yaml", "ar-assistant.yaml")
H100 = "NVIDIA-H100-80GB-HBM3"
POOL_LABEL = "tessera.test/pool"
MANAGED = "app.kubernetes.io/managed-by=tessera"
GROUP, VERSION, PLURAL = "tessera.ai", "v1alpha1", "compoundinferencesystems"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
OPERATOR_AGENTS = ("tessera-operator", "kopf")


@dataclass
class GpuPool:
    id: str
    nodes: list[str]

    @property
    def selector(self) -> str:
        return f"{POOL_LABEL}={self.id}"


def make_pool(core: client.CoreV1Api, nodes: int, gpus_per_node: int = 8) -> GpuPool:
    pool_id = uuid.uuid4().hex[:6]
    names = create_gpu_nodes(core, nodes, H100, gpus_per_node=gpus_per_node, name_prefix=f"h100-{pool_id}")
    for name in names:
        core.patch_node(name, {"metadata": {"labels": {POOL_LABEL: pool_id}}})
        wait_node_ready(core, name)
    return GpuPool(pool_id, names)


def delete_pool(core: client.CoreV1Api, pool: GpuPool) -> None:
    for name in pool.nodes:
        try:
            core.delete_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


@dataclass
class OperatorProcess:
    kubeconfig: Path
    logdir: Path
    namespace: str
    pool: GpuPool
    state_namespace: str
    resync_s: float = 5.0
    extra_args: list[str] = field(default_factory=list)
    metrics_port: int = 0
    """The port of the running process's /metrics (each start picks a free one)."""
    process: subprocess.Popen | None = None
    runs: int = 0

    def command(self) -> list[str]:
        self.metrics_port = free_port()
        return [sys.executable, "-P", "-m", "tessera", "operator", "--kubeconfig", str(self.kubeconfig),
                "--namespace", self.namespace, "--node-selector", self.pool.selector,
                "--state-namespace", self.state_namespace, "--mig-config-propagation", "1.5",
                "--resync", str(self.resync_s), "--debounce", "0.3", "--solve-time-limit", "120",
                "--health-port", str(free_port()), "--metrics-port", str(self.metrics_port),
                # A killed operator holds its Lease until it expires: a short one keeps restarts quick.
                "--lease-duration", "4", *self.extra_args]

    @property
    def log(self) -> Path:
        return self.logdir / f"operator-{self.runs}.log"

    def start(self, exit_at: str | None = None) -> "OperatorProcess":
        self.runs += 1
        env = {k: v for k, v in os.environ.items() if k != "TESSERA_TEST_EXIT_AT"}
        env["PYTHONSAFEPATH"] = "1"
        if exit_at:
            env["TESSERA_TEST_EXIT_AT"] = exit_at
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([*die_with_parent_prefix(), *self.command()], stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True, cwd=self.logdir)
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no clean-up, as a crash or an OOM kill."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def metric_samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """A metric's samples on the operator's /metrics, as Prometheus scrapes them: (labels, value) each."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return [(sample.labels, sample.value) for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == name]

    def metric(self, name: str) -> float:
        """The sum of a metric's samples, every label set."""
        return sum(value for _, value in self.metric_samples(name))

    def log_text(self) -> str:
        return "\n".join((self.logdir / f"operator-{i}.log").read_text(errors="replace")[-4000:]
                         for i in range(1, self.runs + 1) if (self.logdir / f"operator-{i}.log").exists())


def apply_examples(kubectl, namespace: str, names=THREE_EXAMPLES) -> list[str]:
    for name in names:
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / name))
    return [Path(n).stem for n in names]


def system_yaml(name: str, **spec_changes) -> str:
    """The single-model example under another name, with spec fields replaced."""
    document = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"].update(spec_changes)
    return yaml.safe_dump(document)


def systems(custom: client.CustomObjectsApi, namespace: str) -> dict[str, dict]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return {item["metadata"]["name"]: item for item in items}


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def is_true(obj: dict, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


def wait_ready(custom, namespace: str, names: list[str], timeout: float, operator: OperatorProcess) -> dict:
    def ready():
        if not operator.alive():
            raise AssertionError(f"operator exited ({operator.process.returncode}):\n{operator.log_text()}")
        found = systems(custom, namespace)
        return found if all(n in found and is_true(found[n], "Ready") for n in names) else None
    try:
        return wait_for(ready, timeout, f"systems {names} Ready", interval=0.5)
    except TimeoutError:
        found = systems(custom, namespace)
        states = {n: (found.get(n, {}).get("status") or {}).get("conditions") for n in names}
        raise AssertionError(f"not Ready in {timeout}s: {json.dumps(states, indent=1)}\n"
                             f"{pods_not_running(custom.api_client, namespace)}\n{operator.log_text()}") from None


def pods_not_running(api_client: client.ApiClient, namespace: str) -> str:
    """Why the servers are not up, in the scheduler's and kubelet's words (for a failing test's message)."""
    lines = []
    for pod in client.CoreV1Api(api_client).list_namespaced_pod(namespace).items:
        if pod.status.phase != "Running":
            why = [f"{c.type}={c.status} {c.reason or ''} {c.message or ''}" for c in pod.status.conditions or []]
            lines.append(f"pod {pod.metadata.name} {pod.status.phase}: {'; '.join(why)}")
    return "\n".join(lines) or "every pod Running"


def children(api_client: client.ApiClient, namespace: str) -> tuple[list, list]:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    return (apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items,
            core.list_namespaced_service(namespace, label_selector=MANAGED).items)


def server_fingerprints(api_client: client.ApiClient, namespace: str,
                        system: str | None = None) -> dict[str, tuple[str, int, str]]:
    """Deployment name -> (uid, generation, digest of its pod template), of one system or all: a Deployment
    deleted and made again changes its uid, any change of its spec its generation, a roll its template."""
    deployments, _ = children(api_client, namespace)
    return {d.metadata.name: (d.metadata.uid, d.metadata.generation, hashlib.sha256(json.dumps(
        api_client.sanitize_for_serialization(d.spec.template), sort_keys=True).encode()).hexdigest())
        for d in deployments if system is None or d.metadata.labels["tessera.ai/system"] == system}


def pinned_node(deployment) -> str:
    terms = deployment.spec.template.spec.affinity.node_affinity \
        .required_during_scheduling_ignored_during_execution.node_selector_terms
    (expression,) = terms[0].match_expressions
    assert expression.key == "kubernetes.io/hostname" and expression.operator == "In"
    (node,) = expression.values
    return node


def gpu_resource(deployment) -> str:
    (name,) = [r for r in deployment.spec.template.spec.containers[0].resources.limits
               if r.startswith("nvidia.com/")]
    return name


def signature(api_client, namespace: str, pool: GpuPool) -> dict:
    """What the operator made, with node names replaced by their position in the pool (comparable across pools)."""
    core = client.CoreV1Api(api_client)
    position = {name: i for i, name in enumerate(sorted(pool.nodes))}
    deployments, services = children(api_client, namespace)
    servers = sorted(
        (d.metadata.labels["tessera.ai/system"], d.metadata.labels["tessera.ai/task"], gpu_resource(d),
         position[pinned_node(d)], d.spec.replicas,
         {e.name: e.value for e in d.spec.template.spec.containers[0].env}["TESSERA_BATCH_SIZE"])
        for d in deployments)
    layouts = {position[name]: gpu_states(core.read_node(name)) for name in pool.nodes}
    return {"servers": servers, "services": sorted(s.metadata.name for s in services), "layouts": layouts}


def operator_writes(audit_log: Path, since_line: int) -> list[dict]:
    """Writes the operator (its client, or kopf's) made, from the API server's audit log, after a line.

    Its Lease renewals (leader election, every few seconds) are not counted: they change no cluster state.
    """
    return [event for event in audit_events(audit_log, since_line)
            if (event.get("verb") in WRITE_VERBS and event.get("userAgent", "").startswith(OPERATOR_AGENTS)
                and event["objectRef"].get("resource") != "leases")]  # leader election's heartbeat


def audit_events(audit_log: Path, since_line: int) -> Iterator[dict]:
    """The API server's audit events after a line, whoever made the request."""
    with open(audit_log) as log:
        for number, line in enumerate(log):
            if number >= since_line:
                yield json.loads(line)


def audit_lines(audit_log: Path) -> int:
    with open(audit_log) as log:
        return sum(1 for _ in log)


def new_namespace(core, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    ensure_namespace(core, name)
    return name


def wait_gone(predicate, timeout: float, what: str) -> None:
    wait_for(lambda: not predicate(), timeout, what, interval=0.5)


def stamp() -> float:
    return time.monotonic()
