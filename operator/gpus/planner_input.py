"""The planner's view of a pool: a NodePool built from the nodes' labels and the mig-parted configs.

The planner decides which node GPU serves what (plan GPUs carry node and
device); the operator only tells it what each GPU holds now. The label rule
(a config is trusted only on `success` with matching advertised counts) is
the planner's `node_from_labels`; this module feeds it:

- the mig-parted configs of the ConfigMap the ClusterPolicy names, as one
  layout per GPU (MIG disabled: no instances), in the catalog's profile
  names (a node may advertise a profile under another name, see
  `pools.node_profile_name`);
- GPUs held by an invalid system's last good plan are given as Unknown, so
  the solve leaves them alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import yaml

from tessera.operator.gpus.discovery import MIG_CONFIG_LABEL, MIG_PREFIX, MIG_STATE_LABEL, NodeFacts, Pool, node_profile_name
from tessera.planner.catalog import valid_layouts
from tessera.planner.nodes import GpuLayout, NodePool, NodeState, as_layout, node_from_labels

MigConfigs = dict[str, list[dict[str, object]]]
"""mig-parted config name -> its entries, as the ConfigMap's config.yaml holds them."""


def mig_configs(text: str | None) -> MigConfigs:
    """The configs of a mig-parted config.yaml; {} for a missing or unreadable file."""
    document = yaml.safe_load(text) if text else None
    configs = document.get("mig-configs") if isinstance(document, dict) else None
    return {str(name): entries for name, entries in configs.items() if isinstance(entries, list)} \
        if isinstance(configs, dict) else {}


AdapterGpus = Mapping[tuple[str, int], int | None]
"""The AdapterPools' GPUs, (node, GPU index) -> None: reserved against the compound solve; a poolPriority: lent only
to the systems above it (adapter_pool_decide.py)."""


def reserved_of(adapters: AdapterGpus) -> set[tuple[str, int]]:
    """The AdapterPools' GPUs the compound solve leaves alone."""
    return {slot for slot, above in adapters.items() if above is None}


def lent_of(adapters: AdapterGpus) -> dict[tuple[str, int], int]:
    """The AdapterPools' GPUs lent only to systems above a poolPriority -> that priority."""
    return {slot: above for slot, above in adapters.items() if above is not None}


def planner_pool(pool: Pool, configs: MigConfigs, reserved: Iterable[tuple[str, int]] = (),
                 kept_for: Mapping[str, list[str]] | None = None, adapters: AdapterGpus | None = None) -> NodePool:
    """The pool as the planner takes it; `reserved` (node, GPU index) pairs are left out of the solve; `kept_for`
    (node -> running systems) keeps those nodes' layouts (running_decide.py); `adapters`, the AdapterPools' GPUs,
    are left out or lent (NodeState.usable_above)."""
    left_out, kept = set(reserved) | reserved_of(adapters or {}), kept_for or {}
    lent = {slot: above for slot, above in lent_of(adapters or {}).items() if slot not in left_out}
    return NodePool(gpu=pool.gpu.name, nodes=[
        _without(_node_state(pool, node, configs), {device for name, device in left_out if name == node.name})
        .model_copy(update={"kept_for": list(kept.get(node.name, [])),
                            "usable_above": {device: above for (name, device), above in lent.items()
                                             if name == node.name}})
        for node in pool.nodes])


def _node_state(pool: Pool, node: NodeFacts, configs: MigConfigs) -> NodeState:
    catalog_name = {node_profile_name(profile, node.advertised): profile.name for profile in pool.gpu.profiles}
    layouts = {name: per_gpu_layouts(entries, node.gpu_count, catalog_name, pool.gpu.name)
               for name, entries in configs.items()}
    labels = {MIG_STATE_LABEL: node.mig_state or ""}
    if node.mig_config is not None:
        labels[MIG_CONFIG_LABEL] = node.mig_config
    for advertised, seen in node.advertised.items():
        labels[f"{MIG_PREFIX}{catalog_name.get(advertised, advertised)}.count"] = str(seen.count)
    return node_from_labels(node.name, labels, node.gpu_count,
                            {name: gpus for name, gpus in layouts.items() if gpus is not None})


def per_gpu_layouts(entries: list[dict[str, object]], gpus: int, catalog_name: Mapping[str, str],
                    product: str) -> list[GpuLayout] | None:
    """Each GPU's layout under one mig-parted config; None where the config is not one the planner can read.

    An entry covers `devices` ("all" or indices); MIG off is a GPU with no
    instances. A config that leaves a GPU out, or names a layout the catalog
    does not know for this product, makes the node's GPUs Unknown (never
    planned on) rather than an error: an administrator's config is not ours
    to judge.
    """
    valid = set(valid_layouts(product))
    layouts: list[GpuLayout | None] = [None] * gpus
    for entry in entries:
        if not isinstance(entry, dict):
            return None
        devices = entry.get("devices")
        indices = range(gpus) if devices == "all" else devices if isinstance(devices, list) else None
        if indices is None or any(not isinstance(i, int) or not 0 <= i < gpus for i in indices):
            return None
        devices_of = entry.get("mig-devices") if entry.get("mig-enabled") else {}
        if not isinstance(devices_of, dict):
            return None
        if not all(isinstance(count, int) and count >= 0 for count in devices_of.values()):
            return None
        layout = {catalog_name.get(str(name), str(name)): count for name, count in devices_of.items()}
        if as_layout(layout) and as_layout(layout) not in valid:
            return None
        for index in indices:
            layouts[index] = layout
    if any(layout is None for layout in layouts):
        return None
    return [layout for layout in layouts if layout is not None]


def _without(node: NodeState, devices: set[int]) -> NodeState:
    if not devices:
        return node
    return node.model_copy(update={"gpus": [None if i in devices else layout for i, layout in enumerate(node.gpus)]})
