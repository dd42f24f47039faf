"""Fake GPU nodes for KWOK, labelled the way NVIDIA GPU feature discovery
labels real ones, with the mixed MIG strategy's extended resources.

A node's per-GPU MIG state is kept in an annotation (the stand-in's memory of
what it applied), and its labels and allocatable resources are derived from it
by `render`, so the node helper and the MIG-manager stand-in agree.
"""

from __future__ import annotations

import json
from collections import Counter

from kubernetes import client

from . import mig_table
from .controlplane import KWOK_NODE_ANNOTATION

# Per-GPU state: None = MIG disabled (a whole GPU), else {profile: count}.
GpuState = dict[str, int] | None
STATE_ANNOTATION = "tessera.test/mig-standin-gpus"
# The mig.config value the stand-in last took up (kept on the node, so a node
# created and relabelled between two of its polls is still reconfigured).
HANDLED_ANNOTATION = "tessera.test/mig-standin-handled"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
BASE_RESOURCES = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def render(product: str, gpus: list[GpuState]) -> tuple[dict[str, str], dict[str, str]]:
    """(GFD-style labels, extended resources) for GPUs in the given states."""
    counts: Counter[str] = Counter()
    for state in gpus:
        for profile, n in (state or {}).items():
            counts[profile] += n
    whole = sum(1 for state in gpus if state is None)
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(mig_table.PRODUCTS[product][1]),
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
    }
    resources = {"nvidia.com/gpu": str(whole)}
    shapes = mig_table.profiles(product)
    for profile, n in sorted(counts.items()):
        if n == 0:
            continue
        prefix = f"{MIG_RESOURCE_PREFIX}{profile}"
        labels[f"{prefix}.count"] = str(n)
        labels[f"{prefix}.memory"] = str(mig_table.profile_memory_mib(product, profile))
        labels[f"{prefix}.slices.gi"] = str(shapes[profile].compute_slices)
        labels[f"{prefix}.slices.ci"] = str(shapes[profile].compute_slices)
        resources[prefix] = str(n)
    return labels, resources


def node_body(name: str, product: str, gpus: list[GpuState], mig_config: str) -> dict:
    labels, resources = render(product, gpus)
    key, value = KWOK_NODE_ANNOTATION
    capacity = {**BASE_RESOURCES, **resources}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **labels,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                MIG_CONFIG: mig_config,
                MIG_STATE: "success",
                "nvidia.com/gpu.deploy.mig-manager": "true",
            },
            "annotations": {key: value, STATE_ANNOTATION: json.dumps(gpus), HANDLED_ANNOTATION: mig_config},
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def create_gpu_nodes(
    api: client.CoreV1Api,
    count: int,
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpus_per_node: int = 8,
    name_prefix: str | None = None,
    mig_devices: dict[str, int] | None = None,
) -> list[str]:
    """Creates `count` KWOK nodes with `gpus_per_node` GPUs of `product`.

    Every GPU starts with MIG disabled (mig.config=all-disabled), or, when
    `mig_devices` is given, with that layout on every GPU (mig.config=
    all-<layout>); layouts are checked against the stand-in's table.
    """
    if mig_devices is None:
        gpus: list[GpuState] = [None] * gpus_per_node
        config = "all-disabled"
    else:
        mig_table.place(product, mig_devices)
        gpus = [dict(mig_devices) for _ in range(gpus_per_node)]
        config = "all-" + "-".join(f"{p}x{n}" for p, n in sorted(mig_devices.items()))
    prefix = name_prefix or f"gpu-{product.lower().replace('nvidia-', '')}"
    names = []
    existing = {n.metadata.name for n in api.list_node().items}
    i = 0
    while len(names) < count:
        name = f"{prefix}-{i}"
        i += 1
        if name in existing:
            continue
        api.create_node(node_body(name, product, gpus, config))
        names.append(name)
    return names


def create_cpu_node(api: client.CoreV1Api, name: str = "cpu-0") -> str:
    """A KWOK node without GPUs, for pods that need none (Jobs, controllers)."""
    key, value = KWOK_NODE_ANNOTATION
    api.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
                     "annotations": {key: value}},
        "status": {"capacity": BASE_RESOURCES, "allocatable": BASE_RESOURCES},
    })
    return name


def gpu_states(node: client.V1Node) -> list[GpuState]:
    return json.loads((node.metadata.annotations or {})[STATE_ANNOTATION])
