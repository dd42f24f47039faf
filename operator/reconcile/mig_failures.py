"""mig-manager's `failed` and `rebooting`: what tessera records, what status says, when a pool plans without a node.

Pure, like decide.py: node facts and the time in, actions and conditions out.

- `failed` for the config a node's label names: tessera records it on the
  node the first time it sees it (annotation naming.MIG_FAILURE: the config
  and when), so the back-off and "failed since" survive a restart and a new
  leader. While the record stands, the node keeps the layout mig-manager left
  on it: tessera asks nothing else of it (its GPUs are Unknown to the
  planner, no model server goes onto it), and every system with servers
  planned on it is Degraded, reason MigLayoutFailed, naming the node (the
  condition's change posts a Warning Event). Replicas on other nodes serve on.
- `--mig-failure-backoff` after that, the node is left out of its pool (no
  cordon: tessera plans without it and touches nothing on it), so the pool's
  slots change and it plans again on the healthy nodes, instead of waiting
  for someone to remove a label.
- `success` or another config ends the record (mig-manager succeeded on a
  retry, an admin relabelled it): the node is back in its pool, which plans
  again with it. A retry of the same config (`pending`, `rebooting`) keeps
  the record: a node back in its pool while `pending` would be planned
  without its GPUs (Unknown), and its `success` then changes no slot of the
  pool, so nothing would plan on it again.
- `rebooting` is mig-manager at work (a host reboot on the way to
  `success`): no record, no Degraded; discovery.py keeps the node in its
  pool while the reboot makes it NotReady.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from tessera.operator.api import status as st
from tessera.operator.gpus.discovery import MigFailure, NodeFacts
from tessera.operator.reconcile.actions import RecordMigFailure

STATE_FAILED = "failed"
RETRYING = ("pending", "rebooting")
"""mig-manager's states on the way to `success` or `failed` again."""


@dataclass(frozen=True)
class NodeFailure:
    """A pool node in its back-off: what failed, since when, and when the pool plans without it."""

    node: str
    config: str
    since: float
    leaves_pool_at: float


def current_failure(node: NodeFacts, now: float) -> MigFailure | None:
    """The failure a node shows now: its record while the record still holds, else one that starts now.

    None unless mig-manager reports `failed`, or retries (RETRYING) the
    config of a record. A record for another config is over (the node was
    relabelled since); whole seconds keep the status message the same on
    every reconcile.
    """
    if node.mig_config is None:
        return None
    recorded = node.mig_failure if node.mig_failure is not None and node.mig_failure.config == node.mig_config else None
    if node.mig_state == STATE_FAILED:
        return recorded or MigFailure(node.mig_config, float(math.floor(now)))
    return recorded if node.mig_state in RETRYING else None


def decide_failure_records(nodes: Iterable[NodeFacts], now: float) -> list[RecordMigFailure]:
    """The record writes: a node's first `failed` is recorded with the time, a record that no longer holds goes."""
    actions = []
    for node in sorted(nodes, key=lambda n: n.name):
        failure = current_failure(node, now)
        if failure == node.mig_failure:
            continue
        if failure is None:
            actions.append(RecordMigFailure(node.name, None, reason=f"mig-manager's state is {node.mig_state!r} "
                                            f"for config {node.mig_config!r}: the failure is over"))
        else:
            actions.append(RecordMigFailure(node.name, json.dumps({"config": failure.config, "since": failure.since}),
                                            reason=f"mig-manager reported failed for MIG config {failure.config}"))
    return actions


def left_out(node: NodeFacts, now: float, backoff_s: float) -> bool:
    """A node whose `failed` has outlasted the back-off: its pool plans without it until `success` or another config."""
    failure = current_failure(node, now)
    return failure is not None and now >= failure.since + backoff_s


def in_backoff(nodes: Iterable[NodeFacts], now: float, backoff_s: float) -> dict[str, NodeFailure]:
    """The nodes whose `failed` is still inside the back-off, by name."""
    found = {}
    for node in nodes:
        failure = current_failure(node, now)
        if failure is not None and now < failure.since + backoff_s:
            found[node.name] = NodeFailure(node.name, failure.config, failure.since, failure.since + backoff_s)
    return found


def backoff_requeue(failures: dict[str, NodeFailure], now: float) -> list[float]:
    """Seconds until each back-off ends: the pool plans again then, with no event to wake it."""
    return [max(failure.leaves_pool_at - now, 0.0) for failure in failures.values()]


def failure_condition(failures: dict[str, NodeFailure], nodes: Iterable[str]) -> st.Condition | None:
    """Degraded, MigLayoutFailed, naming each failed node among a system's planned `nodes`; None if none failed."""
    failed = [failures[name] for name in sorted(set(nodes)) if name in failures]
    if not failed:
        return None
    details = "; ".join(
        f"mig-manager reported failed for MIG config {f.config} on node {f.node} since {_utc(f.since)}; it keeps its "
        f"last layout and gets no model server, and unless its state changes it leaves the pool at "
        f"{_utc(f.leaves_pool_at)}, when the pool plans again on the healthy nodes" for f in failed)
    return st.Condition(st.DEGRADED, True, st.MIG_FAILED, f"{details}; see mig-manager's logs on the node")


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
