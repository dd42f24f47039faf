"""What a change of layouts costs: the nodes re-partitioned, priced in the cost stage's units.

mig-manager re-partitions a node at a time, and every pod on the node's GPUs
stops until it is done, so a re-plan that changes a node's layout loses the
capacity the node carries for as long as that takes (MIGRator prices a
reconfiguration the same way: the slice-time it loses). Over the time a plan
is expected to stand, that loss is a share `reconfigure_s / horizon_s` of
the node's capacity; in the cost stage's units (a GPU weighs W, a slice 1)
a changed node costs (W x its GPUs with a layout + their slices) x that
share. The cost stage minimises the cost plus the price of the nodes it
changes: a change is made only when the GPUs and slices it saves outweigh
its price. A node with no MIG instance carries nothing: partitioning it is
free, and it is not counted as changed.

Nodes are grouped by their current layouts (one integer count of nodes
kept per group, not one binary per node): the model's size follows the
number of distinct node layouts, not the pool's size.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from tessera.planner.catalog import GpuProduct, Layout, layout_compute_slices
from tessera.planner.nodes import PoolGpus

if TYPE_CHECKING:
    from tessera.planner.plan import Plan

# What mig-manager takes to re-partition one node: stop the GPU clients, apply the
# layout, restart the device plugin and the clients. NVIDIA's GPU Operator docs give
# "a few minutes" and a node reboot where the driver needs one; an estimate until
# measured on a GPU (bench/README.md).
DEFAULT_RECONFIGURE_S = 120.0
# How long a change's saving is counted. The operator does not yet move a serving node's
# replicas elsewhere before re-partitioning it (issue 28, "make before break"), so a change
# drops what the node serves: by default it must save more than the node carries (a share of
# 1). Once changes are made before they break, set it to how long plans stand.
DEFAULT_HORIZON_S = DEFAULT_RECONFIGURE_S


@dataclass(frozen=True)
class NodeGroup:
    """Nodes whose re-partitionable GPUs carry the same current layouts (() for a GPU without instances)."""

    layouts: tuple[Layout, ...]
    nodes: tuple[str, ...]

    def counts(self) -> Counter[Layout]:
        return Counter(layout for layout in self.layouts if layout)

    @property
    def empty_gpus(self) -> int:
        return sum(1 for layout in self.layouts if not layout)

    def capacity(self, gpu: GpuProduct, gpu_weight: int) -> float:
        """One node's capacity in the cost stage's units: W per GPU with instances, 1 per slice."""
        carrying = [layout for layout in self.layouts if layout]
        return gpu_weight * len(carrying) + sum(layout_compute_slices(gpu, layout) for layout in carrying)


def node_groups(pool: PoolGpus, serving: set[str]) -> list[NodeGroup]:
    """The named nodes that serve (`serving`: the current plan runs a replica there) on re-partitionable
    GPUs with MIG instances, grouped by those layouts.

    GPUs of fixed nodes keep their layouts anyway, and a node that runs
    nothing loses nothing to a change.
    """
    by_node: dict[str, list[Layout]] = defaultdict(list)
    for gpu in pool.free:
        if gpu.node in serving and gpu.current is not None:
            by_node[gpu.node].append(gpu.current)
    groups: dict[tuple[Layout, ...], list[str]] = defaultdict(list)
    for node, layouts in by_node.items():
        if any(layouts):
            groups[tuple(sorted(layouts))].append(node)
    return [NodeGroup(layouts, tuple(nodes)) for layouts, nodes in sorted(groups.items())]


class ChangeSummary(BaseModel):
    """What a re-plan changes on the nodes that carry MIG instances, and why, in the cost stage's units."""

    nodes_changed: list[str] = Field(description="Nodes whose layouts the plan changes (each stops its pods).")
    nodes_kept: list[str] = Field(description="Nodes carrying instances whose layouts the plan keeps.")
    price: float = Field(description="The price of the changed nodes in the cost stage's units (a slice is 1).")
    slices_saved: int | None = Field(
        default=None, description="Slices the plan uses fewer than the cheapest plan that changes no node; None "
                                  "where no such plan serves as much, or none was sought (no node changed).")
    gpus_saved: int | None = Field(default=None, description="GPUs likewise.")
    forgone_slices: int = Field(
        default=0, description="Slices the cheapest plan regardless of change would save beyond this one: "
                               "changes declined because they do not pay for their price.")
    forgone_gpus: int = Field(default=0, description="GPUs likewise.")
    forgone_nodes: int = Field(default=0, description="The nodes that cheapest plan would change beyond this one.")

    @property
    def summary(self) -> str:
        """One line: what changes and what it saves, or what a change would save and why it is not made."""
        changed = len(self.nodes_changed)
        text = f"changes {changed} node{'s' if changed != 1 else ''}"
        if changed and self.slices_saved is not None:
            text += f": saves {self.slices_saved} slices"
            if self.gpus_saved:
                text += f" and {self.gpus_saved} GPU{'s' if self.gpus_saved != 1 else ''}"
        elif changed:
            text += ": needed, no plan keeping them serves as much"
        if self.forgone_nodes > 0:
            gpus = f" and {self.forgone_gpus} GPU{'s' if self.forgone_gpus != 1 else ''}" if self.forgone_gpus else ""
            text += (f"; keeps {self.forgone_nodes} more: changing them would save {self.forgone_slices} slices"
                     f"{gpus}, less than their price")
        return text + f" (price {self.price:.1f})"


def serving_nodes(current: Plan | None) -> set[str]:
    """The nodes on which the current plan runs a replica."""
    if current is None:
        return set()
    return {g.node for g in current.gpus if g.node is not None and any(i.system for i in g.instances)}


def nodes_changed(pool: PoolGpus, chosen: dict[tuple[str | None, int | None], Layout],
                  serving: set[str]) -> tuple[list[str], list[str]]:
    """(changed, kept) among the serving nodes with instances, by the layouts the plan gives their GPUs."""
    changed: set[str] = set()
    carrying: set[str] = set()
    for gpu in pool.free:
        if gpu.node not in serving or gpu.current is None:
            continue
        if gpu.current:
            carrying.add(gpu.node)
        if chosen.get((gpu.node, gpu.device), ()) != gpu.current:
            changed.add(gpu.node)
    changed &= carrying
    return sorted(changed), sorted(carrying - changed)
