"""GPU pools as the operator sees them: node facts from GPU feature discovery labels.

A pool is the schedulable nodes of one GPU product (`nvidia.com/gpu.product`),
optionally narrowed by the operator's node selector. Everything here is pure:
it reads node objects (plain dicts, as the API returns them) and never calls
the API.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from tessera.operator import naming
from tessera.planner.catalog import CATALOG, GpuProduct, MigProfile

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_REBOOTING = "rebooting"
"""mig-manager's state while the host reboots to finish a MIG mode change: work in progress, not a failure."""
MIG_PREFIX = "nvidia.com/mig-"
MIG_RESOURCE_PREFIX = MIG_PREFIX
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MIB_PER_GB = 1024
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb(?:\+me)?)\.(?P<field>count|memory|slices\.gi)$")


@dataclass(frozen=True)
class AdvertisedProfile:
    """A MIG profile as a node's labels describe it."""

    name: str
    count: int
    memory_mib: int | None
    compute_slices: int | None


@dataclass(frozen=True)
class MigFailure:
    """mig-manager reported `failed` for `config` on a node; tessera first saw it at `since` (Unix seconds)."""

    config: str
    since: float


@dataclass
class NodeFacts:
    name: str
    product_label: str
    gpu_count: int
    schedulable: bool
    hostname: str
    mig_config: str | None
    mig_state: str | None
    requested_config: str | None
    advertised: dict[str, AdvertisedProfile] = field(default_factory=dict)
    gpu_memory_mib: int | None = None
    approved_config: str | None = None
    """The MIG config an admin approved re-partitioning the node for (annotation tessera.ai/approve-mig-config)."""
    mig_failure: MigFailure | None = None
    """tessera's record of a `failed` on this node (annotation naming.MIG_FAILURE), as last written."""
    not_ready_since: float | None = None
    """When the node's Ready condition last turned from True (Unix seconds); None while it is Ready."""
    cordoned_for: str | None = None
    """The MIG config tessera cordoned the node to change to (annotation naming.CORDONED); None: not tessera's cordon."""
    change_loss: str | None = None
    """What the change costs until the node serves again, as tessera's cordon recorded it (naming.CHANGE_LOSS)."""
    cordoned_up: bool = False
    """An admin cordoned the node (not tessera) while it is up (Ready, or NotReady within the grace): out of its
    pool, but a cordon stops no pod, so the pods on it run on and serve."""
    gpu_allocatable: dict[str, int] = field(default_factory=dict)
    """The node's allocatable `nvidia.com/*` resources over zero: the device plugin's, which the scheduler counts."""

    def advertised_counts(self) -> dict[str, int]:
        return {name: p.count for name, p in self.advertised.items() if p.count}


def node_facts(node: dict, requested_annotation: str, at: float = 0.0,
               not_ready_grace_s: float = 0.0) -> NodeFacts | None:
    """The facts of a GPU node, or None for a node without GPU feature discovery labels.

    A node NotReady for less than `not_ready_grace_s` at `at` (Unix seconds) still counts as schedulable:
    a kubelet restart or a short network partition is not a node that left the pool (no re-plan for it)."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    product = labels.get(PRODUCT_LABEL)
    if not product or labels.get(GPU_COUNT_LABEL) is None:
        return None
    return NodeFacts(
        name=metadata["name"],
        product_label=product,
        gpu_count=int(labels[GPU_COUNT_LABEL]),
        schedulable=_schedulable(node, at, not_ready_grace_s),
        cordoned_up=_admin_cordoned(node) and _up(node, at, not_ready_grace_s),
        hostname=labels.get(HOSTNAME_LABEL, metadata["name"]),
        mig_config=labels.get(MIG_CONFIG_LABEL),
        mig_state=labels.get(MIG_STATE_LABEL),
        requested_config=(metadata.get("annotations") or {}).get(requested_annotation),
        advertised=_advertised(labels),
        gpu_memory_mib=int(labels[GPU_MEMORY_LABEL]) if labels.get(GPU_MEMORY_LABEL, "").isdigit() else None,
        approved_config=(metadata.get("annotations") or {}).get(naming.APPROVE_MIG_CONFIG),
        mig_failure=_mig_failure((metadata.get("annotations") or {}).get(naming.MIG_FAILURE)),
        cordoned_for=(metadata.get("annotations") or {}).get(naming.CORDONED),
        change_loss=(metadata.get("annotations") or {}).get(naming.CHANGE_LOSS),
        not_ready_since=_not_ready_since(node),
        gpu_allocatable=_gpu_allocatable(node),
    )


def _gpu_allocatable(node: dict) -> dict[str, int]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: int(value) for name, value in allocatable.items()
            if name.startswith("nvidia.com/") and str(value).isdigit() and int(value) > 0}


def _mig_failure(text: str | None) -> MigFailure | None:
    """The recorded failure; None for none or one that cannot be read (it is then recorded afresh)."""
    try:
        record = json.loads(text) if text else None
        return MigFailure(str(record["config"]), float(record["since"])) if isinstance(record, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


def _schedulable(node: dict, at: float, not_ready_grace_s: float) -> bool:
    """Not cordoned but by tessera for its re-partition, and up (_up). An admin's cordon takes it out at once."""
    return not _admin_cordoned(node) and _up(node, at, not_ready_grace_s)


def _admin_cordoned(node: dict) -> bool:
    """Unschedulable without tessera's record of its own cordon (naming.CORDONED)."""
    tessera_cordon = naming.CORDONED in ((node.get("metadata") or {}).get("annotations") or {})
    return bool((node.get("spec") or {}).get("unschedulable")) and not tessera_cordon


def _up(node: dict, at: float, not_ready_grace_s: float) -> bool:
    """Ready, rebooting for mig-manager (a MIG reboot is not a node that left) or NotReady for less than the grace."""
    rebooting = ((node.get("metadata") or {}).get("labels") or {}).get(MIG_STATE_LABEL) == MIG_REBOOTING
    since = _not_ready_since(node)
    return rebooting or since is None or at - since < not_ready_grace_s


def _not_ready_since(node: dict) -> float | None:
    """When Ready last left True; a node that never reported Ready counts as NotReady since the epoch."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "True":
        return None
    stamp = (ready or {}).get("lastTransitionTime")
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() if stamp else 0.0
    except ValueError:
        return 0.0


def grace_left_s(node: NodeFacts, at: float, not_ready_grace_s: float) -> float | None:
    """Seconds until a NotReady node's grace period ends (it then leaves its pool); None for any other node."""
    if node.not_ready_since is None or not node.schedulable or node.mig_state == MIG_REBOOTING:
        return None
    return max(0.0, node.not_ready_since + not_ready_grace_s - at)


def _advertised(labels: dict[str, str]) -> dict[str, AdvertisedProfile]:
    fields: dict[str, dict[str, int]] = {}
    for key, value in labels.items():
        match = _MIG_LABEL.match(key)
        if match and value.isdigit():
            fields.setdefault(match["profile"], {})[match["field"]] = int(value)
    return {
        name: AdvertisedProfile(name, f.get("count", 0), f.get("memory"), f.get("slices.gi"))
        for name, f in fields.items()
    }


def catalog_product(product_label: str, gpu_memory_mib: int | None = None) -> GpuProduct | None:
    """The catalog's GPU for a GFD product label (`NVIDIA-H100-80GB-HBM3` -> H100-80GB).

    The family (A100, H100, H200) must appear in the label; among the
    catalog's GPUs of that family, the one whose memory the label names (or,
    failing that, the one closest to `nvidia.com/gpu.memory`) is chosen.
    """
    upper = product_label.upper()
    family = [gpu for gpu in CATALOG.values() if gpu.name.split("-")[0] in upper]
    if not family:
        return None
    named = [gpu for gpu in family if f"{int(gpu.memory_gb)}GB" in upper]
    if len(named) == 1:
        return named[0]
    if gpu_memory_mib is not None:
        return min(family, key=lambda gpu: abs(gpu.memory_gb * MIB_PER_GB - gpu_memory_mib))
    return family[0] if len(family) == 1 else None


def node_profile_name(profile: MigProfile, advertised: dict[str, AdvertisedProfile]) -> str:
    """The name under which this node advertises a catalog MIG profile.

    Where GFD names a profile of the same compute slices and (within 15%)
    the same memory differently from the catalog (a 96 GB H100's `1g.12gb`
    for the catalog's `1g.10gb`), the node's name is the one mig-manager and
    the device plugin understand. Profiles the node does not advertise yet
    keep the catalog's name.
    """
    if profile.name in advertised:
        return profile.name
    for name, seen in sorted(advertised.items()):
        if seen.compute_slices != profile.compute_slices or seen.memory_mib is None:
            continue
        if abs(seen.memory_mib / MIB_PER_GB - profile.memory_gb) <= 0.15 * profile.memory_gb:
            return name
    return profile.name


@dataclass
class Pool:
    """Schedulable nodes of one GPU product; GPU slots in a deterministic order."""

    product_label: str
    gpu: GpuProduct
    nodes: list[NodeFacts]

    @property
    def key(self) -> str:
        return self.product_label

    @property
    def gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)

    def slots(self) -> list[tuple[NodeFacts, int]]:
        """(node, GPU index on the node) for every GPU: nodes sorted by name, GPUs in order."""
        return [(node, index) for node in sorted(self.nodes, key=lambda n: n.name)
                for index in range(node.gpu_count)]

    def node(self, name: str) -> NodeFacts:
        return next(n for n in self.nodes if n.name == name)


@dataclass
class UnknownProduct:
    product_label: str
    nodes: list[str]


def group_pools(nodes: list[NodeFacts]) -> tuple[list[Pool], list[UnknownProduct]]:
    """Pools of schedulable, MIG-capable nodes by product; products the catalog lacks, apart."""
    by_product: dict[str, list[NodeFacts]] = {}
    for node in nodes:
        if node.schedulable and node.gpu_count > 0:
            by_product.setdefault(node.product_label, []).append(node)
    pools, unknown = [], []
    for label, members in sorted(by_product.items()):
        gpu = catalog_product(label, members[0].gpu_memory_mib)
        if gpu is None:
            unknown.append(UnknownProduct(label, sorted(n.name for n in members)))
        else:
            pools.append(Pool(label, gpu, sorted(members, key=lambda n: n.name)))
    return pools, unknown
