"""Pure builders: from a placed plan to the Kubernetes objects and patches that realise it.

No API calls here; every function takes plain data and returns plain dicts,
so the objects tessera writes are unit-tested without a cluster.

Model-server contract (docs/model-server-contract.md): one Deployment per
(task configuration, node), pinned to the node by required node affinity on
`kubernetes.io/hostname`, each pod holding one MIG instance
(`nvidia.com/mig-<profile>: 1`, or `nvidia.com/gpu: 1` for a whole GPU
without MIG) and told by environment variables what batch size, batching
delay and process count to run with and where its downstream tasks'
Services are. An MPS degree k > 1 runs k server processes in that one pod,
under an MPS control daemon the pod's entry point starts (the device plugin
refuses MPS sharing of MIG devices), with its pipe and log directories on an
emptyDir.
"""

from __future__ import annotations

import yaml

from tessera.operator import naming
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.gpus.node_plans import NodePlan, ServerKey
from tessera.operator.gpus.discovery import (
    HOSTNAME_LABEL, MIG_CONFIG_LABEL, MIG_RESOURCE_PREFIX, MIG_STATE_LABEL, WHOLE_GPU_RESOURCE,
)
from tessera.operator.settings import OperatorSettings
from tessera.operator.pod_security import RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY
from tessera.operator.api.systems import SystemRef
from tessera.planner.model import SystemSpec
from tessera.planner.plan import ConfigPlan, TaskPlan

MIG_PARTED_VERSION = "v1"
MIG_PARTED_KEY = "config.yaml"
# NVIDIA's defaults that every mig-parted config of the GPU Operator carries; kept when tessera creates the file.
NVIDIA_DEFAULT_CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
}
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
MPS_LOG_DIRECTORY = "/tmp/nvidia-mps-log"
SERVER_CONTAINER = "server"
MODEL_SERVER = "model-server"
"""The component label (naming.CHILD_KIND_LABEL) of model-server Deployments."""
DISRUPTION_BUDGET = "disruption-budget"
"""The component label of a model-server Deployment's PodDisruptionBudget."""
BUDGET_MAX_UNAVAILABLE = 1
"""A drain evicts one pod of a server Deployment at a time, never blocked (docs/operator.md, "Disruption budgets")."""
CONFIGURATION_LABEL = f"{naming.GROUP}/configuration"
"""On the servers of a system with a frontend: their task configuration, which its Service selects on every node."""


# -- MIG -----------------------------------------------------------------------

def mig_parted_entries(node_plan: NodePlan, profile_names: dict[str, str]) -> list[dict]:
    """mig-parted entries for a node: GPUs of one layout share an entry; idle GPUs have MIG off.

    `profile_names` maps the catalog's profile names to the node's (where
    GPU feature discovery names them differently).
    """
    by_layout: dict[tuple, list[int]] = {}
    for index, layout in sorted(node_plan.layouts.items()):
        by_layout.setdefault(layout, []).append(index)
    entries = [
        {"devices": devices, "mig-enabled": True,
         "mig-devices": {profile_names.get(name, name): count for name, count in layout}}
        for layout, devices in sorted(by_layout.items(), key=lambda item: item[1])
    ]
    idle = [i for i in range(node_plan.gpu_count) if i not in node_plan.layouts]
    if idle:
        entries.append({"devices": idle, "mig-enabled": False})
    return entries


def advertised_counts_expected(node_plan: NodePlan, profile_names: dict[str, str]) -> dict[str, int]:
    """The `nvidia.com/mig-<profile>.count` labels a node shows once its layout is applied."""
    return {profile_names.get(name, name): count for name, count in node_plan.profile_counts().items()}


def mig_parted_text(current_text: str | None, wanted: dict[str, list[dict]], keep: set[str]) -> str:
    """The ConfigMap's config.yaml with tessera's `wanted` configs added.

    Configs that are not tessera's (NVIDIA's defaults, an administrator's)
    stay as they are; tessera's stay while a node uses them (`keep`) or they
    are wanted, and are never edited in place (their names are their
    content's hash).
    """
    document = yaml.safe_load(current_text) if current_text else None
    if not isinstance(document, dict) or not isinstance(document.get("mig-configs"), dict):
        document = {"version": MIG_PARTED_VERSION, "mig-configs": dict(NVIDIA_DEFAULT_CONFIGS)}
    configs = {
        name: entries for name, entries in document["mig-configs"].items()
        if not naming.is_tessera_mig_config(name) or name in keep or name in wanted
    }
    configs.update(wanted)
    return yaml.safe_dump({**document, "mig-configs": configs}, sort_keys=True)


def node_relabel_patch(config: str) -> dict:
    """One merge patch: the new config and no state label, so only a later `success` counts."""
    return {"metadata": {
        "labels": {MIG_CONFIG_LABEL: config, MIG_STATE_LABEL: None},
        "annotations": {naming.MIG_CONFIG_REQUESTED: config},
    }}


def cordon_ops(config: str, loss: str | None = None) -> list[dict]:
    """Cordon, with the record that tessera did it and for which config, and the loss of a change without
    replacement capacity (None: none), as one JSON patch that holds only while the node is not cordoned (a `test`
    for null passes on an absent field): an admin's cordon that came after tessera read the node stays the admin's.
    Nodes carry annotations (the TTL controller's) for the record to go into."""
    return [{"op": "test", "path": "/spec/unschedulable", "value": None},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
            {"op": "add", "path": _RECORD, "value": config},
            *([{"op": "add", "path": _LOSS, "value": loss}] if loss else [])]


def uncordon_ops(config: str, loss_recorded: bool = False) -> list[dict]:
    """Lift tessera's cordon, its record and the loss it recorded (if any, as read), as one JSON patch that holds
    only while the record still names `config`: an admin who removed or changed it since (took the cordon over)
    keeps the node cordoned."""
    return [{"op": "test", "path": _RECORD, "value": config}, {"op": "remove", "path": _RECORD},
            *([{"op": "remove", "path": _LOSS}] if loss_recorded else []),
            {"op": "add", "path": "/spec/unschedulable", "value": False}]


def _annotation_pointer(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


_RECORD = _annotation_pointer(naming.CORDONED)
"""tessera's cordon record as a JSON pointer."""
_LOSS = _annotation_pointer(naming.CHANGE_LOSS)


# -- model servers -------------------------------------------------------------

def deployment_name(system: SystemRef, key: ServerKey, task: TaskPlan, config: ConfigPlan) -> str:
    """The same Deployment across plans: the task configuration (variant, segment, batch) and its node."""
    return child_name(system.name, task.task, task.variant, config.segment.mig_profile,
                      f"mps{config.segment.mps}", f"batch{config.batch}", key.node)


def configuration_name(system: SystemRef, task: TaskPlan, config: ConfigPlan) -> str:
    """A task configuration across nodes: its Service (frontend routing) and its servers' label value."""
    return child_name(system.name, task.task, task.variant, config.segment.mig_profile,
                      f"mps{config.segment.mps}", f"batch{config.batch}")


def service_name(system: SystemRef, task: str) -> str:
    """A task's Service: stable while the task exists, whatever its plan."""
    return child_name(system.name, task)


def batch_delay_ms(config: ConfigPlan) -> float:
    """How long a server may hold a partial batch: one batch latency of its own configuration (none at batch 1).

    Of the configuration alone, never of the plan: the task's budget is a
    level the pool's joint solve picks, and it moves when another system or
    a node changes, which would roll this server for nothing. One batch
    latency is what every budget the planner can give the configuration
    allows: a budget holds at least two batch latencies (planner
    `latency.fits_budget`), and a stage stays within its budget while its
    batches form within the budget less one batch latency
    (docs/model-server-contract.md). A batch that forms slower than that is
    below the segment's capacity, so cutting it short costs no throughput.
    """
    return 0.0 if config.batch == 1 else round(config.batch_latency_ms, 1)


def downstream_urls(system: SystemRef, spec: SystemSpec, task: str, port: int) -> dict[str, str]:
    if spec.frontend is not None:  # the frontend carries each request through the graph: no fan-out twice
        return {}
    return {edge.target: f"http://{service_name(system, edge.target)}.{system.namespace}.svc:{port}"
            for edge in spec.children(task)}


def server_env(system: SystemRef, spec: SystemSpec, task: TaskPlan, config: ConfigPlan, port: int) -> list[dict]:
    downstream = downstream_urls(system, spec, task.task, port)
    values = {
        "TESSERA_SYSTEM": system.name,
        "TESSERA_TASK": task.task,
        "TESSERA_VARIANT": task.variant,
        "TESSERA_MODEL_NAME": task.variant,  # the model name in the Open Inference Protocol's paths
        "TESSERA_MIG_PROFILE": config.segment.mig_profile,
        "TESSERA_BATCH_SIZE": str(config.batch),
        "TESSERA_MAX_BATCH_DELAY_MS": f"{batch_delay_ms(config):g}",
        "TESSERA_PROCESSES": str(config.segment.mps),
        "TESSERA_PORT": str(port),
        "TESSERA_GRAPH": "frontend" if spec.frontend is not None else "servers",
        "TESSERA_DOWNSTREAM_URLS": ",".join(f"{t}={url}" for t, url in sorted(downstream.items())),
    }
    for target, url in sorted(downstream.items()):
        values[f"TESSERA_DOWNSTREAM_{naming.env_name(target)}_URL"] = url
    if config.segment.mps > 1:
        values["CUDA_MPS_PIPE_DIRECTORY"] = MPS_PIPE_DIRECTORY
        values["CUDA_MPS_LOG_DIRECTORY"] = MPS_LOG_DIRECTORY
    return [{"name": name, "value": value} for name, value in values.items()]


def gpu_resource(mig_profile: str, whole_gpu: bool) -> str:
    return WHOLE_GPU_RESOURCE if whole_gpu else f"{MIG_RESOURCE_PREFIX}{mig_profile}"


def deployment(system: SystemRef, spec: SystemSpec, key: ServerKey, task: TaskPlan, replicas: int,
               hostname: str, node_profile: str, settings: OperatorSettings, whole_gpu: bool = False) -> dict:
    config = task.configs[key.config]
    variant = spec.task(task.task).variant(task.variant)
    name = deployment_name(system, key, task, config)
    labels = naming.child_labels(system.name, task.task, MODEL_SERVER)
    pod_labels = {**naming.selector_labels(system.name, task.task), naming.SCHEMA_LABEL: naming.SCHEMA_VERSION,
                  "tessera.ai/deployment": name}
    if spec.frontend is not None:
        # Only with a frontend: switching it on already rolls the servers (TESSERA_GRAPH), so the label adds no
        # rollout, and servers of systems without one keep the template (and applied hash) they have.
        pod_labels[CONFIGURATION_LABEL] = configuration_name(system, task, config)
    resource = gpu_resource(node_profile, whole_gpu)
    container = {
        "name": SERVER_CONTAINER,
        "image": variant.image or settings.default_image,
        "args": list(variant.args),
        "env": server_env(system, spec, task, config, settings.server_port),
        "ports": [{"name": "http", "containerPort": settings.server_port}],
        "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
    }
    pod_spec: dict = {
        "securityContext": RESTRICTED_POD_SECURITY,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}}},
        # GPU nodes are often tainted for GPU pods; tessera's servers are the GPU pods.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
    }
    if config.segment.mps > 1:
        container["volumeMounts"] = [{"name": "mps-pipe", "mountPath": MPS_PIPE_DIRECTORY},
                                     {"name": "mps-log", "mountPath": MPS_LOG_DIRECTORY}]
        pod_spec["volumes"] = [{"name": "mps-pipe", "emptyDir": {"medium": "Memory"}},
                               {"name": "mps-log", "emptyDir": {}}]
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": system.namespace, "labels": labels,
                     "ownerReferences": [system.owner_reference()]},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, "tessera.ai/deployment": name}},
            # A MIG instance is held by one pod: a surge pod would wait for a free instance.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
    return with_applied_hash(body)


def disruption_budget(deployment: dict) -> dict:
    """The PodDisruptionBudget of a model-server Deployment: its name, owner and selector, `maxUnavailable: 1`.

    One pod at a time: a drain (kubectl drain, the cluster autoscaler, a
    node upgrade) evicts the next pod only once the last one's replacement is
    Ready, and a Deployment of one replica is never a drain blocked forever (a
    `minAvailable` of the replicas would be). Pods that are not Ready may be
    evicted whatever the budget (`unhealthyPodEvictionPolicy: AlwaysAllow`): a
    server that does not serve protects nothing. tessera's own changes scale
    Deployments to zero and never evict, so the budget never holds them up.
    """
    metadata = deployment["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
                     "labels": {**metadata["labels"], naming.CHILD_KIND_LABEL: DISRUPTION_BUDGET},
                     "ownerReferences": list(metadata["ownerReferences"])},
        "spec": {"maxUnavailable": BUDGET_MAX_UNAVAILABLE,
                 "selector": {"matchLabels": dict(deployment["spec"]["selector"]["matchLabels"])},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
    return with_applied_hash(body)


def pinned_hostname(deployment: dict) -> str | None:
    """The `kubernetes.io/hostname` a Deployment's required node affinity pins its pods to; None: not pinned."""
    required = ((((deployment["spec"]["template"]["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution")) or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == HOSTNAME_LABEL and expression.get("operator") == "In":
                return str(expression["values"][0])
    return None


def service(system: SystemRef, task: str, port: int) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(system, task), "namespace": system.namespace,
                     "labels": naming.child_labels(system.name, task, "service"),
                     "ownerReferences": [system.owner_reference()]},
        "spec": {"selector": naming.selector_labels(system.name, task),
                 "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}]},
    }
    return with_applied_hash(body)


def with_applied_hash(body: dict) -> dict:
    """Stamps the body's own hash on it: a child whose stamp matches needs no write."""
    stamp = naming.digest(body)[:16]
    body["metadata"].setdefault("annotations", {})[naming.APPLIED_HASH] = stamp
    return body


def applied_hash(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(naming.APPLIED_HASH)
