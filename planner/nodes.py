"""A pool of named nodes: what the planner may use and what it must leave alone.

Plain data, no Kubernetes: the operator reads Node objects and fills these
models (`node_from_labels` keeps the label rule in one place). A node has
GPUs of one product; each GPU's current MIG layout is known or Unknown:

- Unknown (None): the node's MIG state cannot be trusted (the config label
  names no known config, its state is not `success`, or the advertised
  instance counts disagree with the config). Such GPUs are not planned on.
- Known: a layout, possibly empty (no instances). The planner keeps current
  layouts where it can: re-partitioning a GPU stops every pod on it.

Instances held by pods tessera does not own are counted per node and MIG
profile (the device plugin, not the API server, knows which GPU holds them).
They are fixed: every GPU of such a node keeps its current layout, and the
held instances are subtracted from what tessera may use there.
A node kept for running systems (`kept_for`) is fixed the same way, with
nothing held: a re-plan that others caused keeps what it serves.
A GPU may be lent only to systems above a priority (`usable_above`: an
AdapterPool's GPU, which only the systems that outrank it may take); on a
fixed node such a GPU offers nothing (its layout stays, its instances are
not counted: the restriction is kept without a per-GPU share of the node's
held instances).

A node cordoned by someone else is left out of the pool; a node tessera
cordoned itself (to re-partition it) stays in.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tessera.planner.catalog import Layout, gpu_product, valid_layouts

if TYPE_CHECKING:
    from tessera.planner.model import Pool

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_COUNT_LABEL = "nvidia.com/mig-{profile}.count"

GpuLayout = dict[str, int]
"""MIG profile name -> instances on one GPU; {} is a GPU with no instances."""


class NodeState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="The node's name (kubernetes.io/hostname).")
    gpus: list[GpuLayout | None] = Field(
        description="Current MIG layout of each GPU, by device index; None where it is Unknown (not planned on).")
    held: dict[str, int] = Field(
        default_factory=dict,
        description="MIG instances per profile held by pods tessera does not own: fixed, subtracted.")
    cordoned_by: Literal["nobody", "others", "tessera"] = Field(
        default="nobody", description="A node cordoned by others is left out; one tessera cordoned stays in.")
    kept_for: list[str] = Field(
        default_factory=list,
        description="Running systems this node's layouts are kept for: changing them would stop their pods for a "
                    "re-plan others caused (whom to protect is the caller's choice). Fixed, as where others hold "
                    "instances.")
    usable_above: dict[int, int] = Field(
        default_factory=dict,
        description="GPU index -> a poolPriority: only systems of a higher spec.poolPriority may use that GPU "
                    "(an AdapterPool's GPU lent to the systems that outrank it). On a fixed node it offers nothing.")

    @property
    def left_out(self) -> bool:
        return self.cordoned_by == "others"

    @property
    def fixed(self) -> bool:
        """Its layouts may not change: pods tessera does not own hold some of its instances, or it is kept for
        running systems."""
        return bool(self.kept_for) or any(count > 0 for count in self.held.values())

    def plannable_devices(self) -> list[int]:
        if self.left_out:
            return []
        return [device for device, layout in enumerate(self.gpus) if layout is not None]


class NodePool(BaseModel):
    """The GPUs of one product on named nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="GPU product, a name from the catalog.")
    nodes: list[NodeState]

    @model_validator(mode="after")
    def _consistent(self) -> "NodePool":
        try:
            product = gpu_product(self.gpu)
        except KeyError as error:
            raise ValueError(f"gpu: {error.args[0]}") from None
        names = [node.name for node in self.nodes]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"nodes: repeated node names {repeated}")
        known = {p.name for p in product.profiles}
        layouts = set(valid_layouts(product.name))
        for node in self.nodes:
            for device, layout in enumerate(node.gpus):
                if layout is None:
                    continue
                unknown = sorted(set(layout) - known)
                if unknown:
                    raise ValueError(f"node {node.name} GPU {device}: {product.name} has no MIG profiles {unknown}")
                if any(count < 0 for count in layout.values()):
                    raise ValueError(f"node {node.name} GPU {device}: negative instance count in {layout}")
                if as_layout(layout) and as_layout(layout) not in layouts:
                    raise ValueError(f"node {node.name} GPU {device}: {layout} is not a valid MIG layout "
                                     f"of {product.name}")
            for profile, count in node.held.items():
                if profile not in known:
                    raise ValueError(f"node {node.name} held: {product.name} has no MIG profile {profile!r}")
                if count < 0:
                    raise ValueError(f"node {node.name} held: negative count {count} of {profile}")
            outside = sorted(device for device in node.usable_above if not 0 <= device < len(node.gpus))
            if outside:
                raise ValueError(f"node {node.name} usable_above: it has no GPUs {outside}")
        return self

    def without_kept(self) -> "NodePool":
        """The same pool with no node kept for running systems."""
        return self.model_copy(update={"nodes": [node.model_copy(update={"kept_for": []}) for node in self.nodes]})

    def plannable(self) -> list[tuple[str, int]]:
        """(node, device) of every GPU the planner may use, in a stable order."""
        return [(node.name, device) for node in self.nodes for device in node.plannable_devices()]

    def node(self, name: str) -> NodeState:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"pool has no node {name!r}")


def as_layout(layout: Mapping[str, int]) -> Layout:
    """The catalog's form of a layout: sorted (profile, count) pairs without zeros."""
    return tuple(sorted((name, count) for name, count in layout.items() if count > 0))


def node_from_labels(
    name: str,
    labels: Mapping[str, str],
    gpus: int,
    configs: Mapping[str, list[GpuLayout]],
    held: Mapping[str, int] | None = None,
    cordoned_by: Literal["nobody", "others", "tessera"] = "nobody",
) -> NodeState:
    """A node's state from its labels, by the rule the operator trusts.

    `configs` maps a mig-parted config name to the layout of each of the
    node's GPUs under it (the operator reads them from the ConfigMap).
    The config named by `nvidia.com/mig.config` is trusted only when
    `nvidia.com/mig.config.state` is `success` and the advertised
    `nvidia.com/mig-<profile>.count` labels equal the config's instances
    summed over the GPUs; otherwise every GPU of the node is Unknown.
    """
    layouts = _trusted_layouts(labels, gpus, configs)
    return NodeState(name=name, gpus=layouts if layouts is not None else [None] * gpus,
                     held=dict(held or {}), cordoned_by=cordoned_by)


def _trusted_layouts(labels: Mapping[str, str], gpus: int,
                     configs: Mapping[str, list[GpuLayout]]) -> list[GpuLayout] | None:
    config = configs.get(labels.get(MIG_CONFIG_LABEL, ""))
    if config is None or labels.get(MIG_STATE_LABEL) != "success" or len(config) != gpus:
        return None
    expected: Counter[str] = Counter()
    for layout in config:
        expected.update(layout)
    prefix, suffix = MIG_COUNT_LABEL.split("{profile}")
    advertised: Counter[str] = Counter()
    for key, value in labels.items():
        if key.startswith(prefix) and key.endswith(suffix):
            try:
                advertised[key[len(prefix):-len(suffix)]] = int(value)
            except ValueError:
                return None
    if +advertised != +expected:
        return None
    return [dict(layout) for layout in config]


class PlannableGpu(BaseModel):
    """One GPU the planner may use, with what it must respect there."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="Position among the pool's plannable GPUs.")
    node: str | None = None
    device: int | None = Field(default=None, description="GPU index on its node.")
    current: Layout | None = Field(default=None, description="Its current layout, when known.")
    usable: Layout | None = Field(
        default=None, description="On a fixed node: the instances tessera may use (its layout less the held "
                                  "ones); None where the GPU may be re-partitioned.")
    usable_above: int | None = Field(
        default=None, description="Only systems of a higher poolPriority may use it (NodeState.usable_above).")

    @property
    def fixed(self) -> bool:
        return self.usable is not None

    def usable_by(self, priority: int) -> bool:
        """Whether a system of this poolPriority may have instances here."""
        return self.usable_above is None or priority > self.usable_above


class PoolGpus(BaseModel):
    """The pool as the MILP and the assignment see it: its plannable GPUs."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    gpus: tuple[PlannableGpu, ...]

    @property
    def free(self) -> list[PlannableGpu]:
        return [g for g in self.gpus if not g.fixed]

    def fixed_groups(self) -> list[tuple[Layout, Layout, int]]:
        """(layout, usable instances, GPUs) of the fixed GPUs that offer tessera any instance."""
        groups = Counter((g.current, g.usable) for g in self.gpus if g.fixed and g.usable and g.current is not None)
        return [(layout, usable, count) for (layout, usable), count in sorted(groups.items())]

    def current_free_layouts(self) -> dict[Layout, int]:
        return dict(Counter(g.current for g in self.free if g.current))

    def usable_above_counts(self) -> dict[int, int]:
        """poolPriority -> the GPUs that may be re-partitioned and only systems above it may use."""
        return dict(Counter(g.usable_above for g in self.free if g.usable_above is not None))


def pool_gpus(pool: Pool | NodePool) -> PoolGpus:
    """The plannable GPUs of a NodePool, or of a plain Pool (a count of GPUs, nothing known about them)."""
    if not isinstance(pool, NodePool):
        return PoolGpus(gpu=pool.gpu, gpus=tuple(PlannableGpu(index=i) for i in range(pool.gpus)))
    gpus: list[PlannableGpu] = []
    for node in pool.nodes:
        devices = node.plannable_devices()
        usable = _usable_after_held(node, devices) if node.fixed else {}
        for device in devices:
            layout = node.gpus[device]
            above = node.usable_above.get(device)
            gpus.append(PlannableGpu(index=len(gpus), node=node.name, device=device,
                                     current=as_layout(layout) if layout is not None else None,
                                     usable=() if node.fixed and above is not None else usable.get(device),
                                     usable_above=above))
    return PoolGpus(gpu=pool.gpu, gpus=tuple(gpus))


def _usable_after_held(node: NodeState, devices: list[int]) -> dict[int, Layout]:
    """Each GPU's instances less the held ones, which are taken from the GPUs in device order.

    Which GPU holds a foreign pod's instance is the device plugin's secret;
    the node's totals are what counts (and what the checker checks).
    """
    remaining = {device: Counter(node.gpus[device]) for device in devices}
    for profile, held in sorted(node.held.items()):
        for device in devices:
            taken = min(held, remaining[device][profile])
            remaining[device][profile] -= taken
            held -= taken
    return {device: as_layout(counts) for device, counts in remaining.items()}
