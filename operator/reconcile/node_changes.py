"""When a node may change: the one rule the node-changing path consults before it relabels (or cordons) a node.

Two things hold a node's change back. A pause (pause.py): every node of a
paused pool, and every node a paused system's servers run on, keeps its
layout. And, with `--maintenance-window` set, a node whose GPUs serve is
re-partitioned (or cordoned for it) only inside that daily UTC window, or once
an admin's annotation `tessera.ai/approve-mig-config` on the node names the
very config it waits for: an approval is for one change, so an old approval
never lets a later layout through. A node that serves nothing changes at any
time: nothing runs there to disturb. A change tessera began (its cordon's
annotation tessera.ai/cordoned names the config) is finished outside the
window: it was allowed when it began, and holding it would leave the node
cordoned with its Deployments at zero until the next window.

Pure: the time is an argument (seconds since the epoch, UTC).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tessera.operator import naming
from tessera.operator.gpus.discovery import NodeFacts

NEVER = "never"
"""--maintenance-window never: serving nodes change only with an admin's approval."""


@dataclass(frozen=True)
class MaintenanceWindow:
    """A daily UTC time range [start, end) in minutes of the day; it wraps midnight when end < start; None: never."""

    start: int | None
    end: int | None

    @classmethod
    def parse(cls, text: str) -> MaintenanceWindow:
        """`HH:MM-HH:MM` or `never` (the setting's pattern has checked the form)."""
        if text == NEVER:
            return cls(None, None)
        start, end = (int(h) * 60 + int(m) for h, m in (part.split(":") for part in text.split("-")))
        return cls(start, end)

    def contains(self, now: float) -> bool:
        if self.start is None or self.end is None:
            return False
        moment = datetime.fromtimestamp(now, timezone.utc)
        minute = moment.hour * 60 + moment.minute
        if self.start <= self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def describe(self) -> str:
        if self.start is None or self.end is None:
            return "no maintenance window (--maintenance-window never)"
        return f"the maintenance window {_clock(self.start)}-{_clock(self.end)} UTC"


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@dataclass(frozen=True)
class NodeHold:
    """What holds node changes back in one reconcile: pauses (node -> why) and the maintenance rule (None: off)."""

    paused: Mapping[str, str] = field(default_factory=dict)
    window: MaintenanceWindow | None = None

    @classmethod
    def of(cls, paused: Mapping[str, str], window_setting: str | None) -> NodeHold:
        return cls(paused, MaintenanceWindow.parse(window_setting) if window_setting else None)

    def waits(self, node: NodeFacts, config: str, serving: bool, now: float) -> str | None:
        """Why the node may not change to `config` now; None: it may."""
        if node.name in self.paused:
            return self.paused[node.name]
        if (self.window is None or not serving or config in (node.approved_config, node.cordoned_for)
                or self.window.contains(now)):
            return None
        return (f"node {node.name} serves: its change to {config} waits for {self.window.describe()} or an admin's "
                f"approval (kubectl annotate node {node.name} {naming.APPROVE_MIG_CONFIG}={config})")


NO_HOLD = NodeHold()
"""Nothing held back: no pause, no maintenance rule."""
