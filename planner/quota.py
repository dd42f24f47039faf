"""Quotas on MIG instances: at most so many instances of one profile for a set of systems.

A namespace's ResourceQuota on `requests.nvidia.com/mig-<profile>` caps the
pods of that profile its systems may run; every replica of a plan is one pod
requesting one instance (MPS processes share their pod's instance), so the cap
is on the plan's instances of that profile over the namespace's systems. The
operator turns each ResourceQuota into one InstanceQuota per profile (what it
allows less what pods tessera does not own already hold); the planner keeps
every plan within them (a constraint of the MILP, and a check of the
independent checker), serving less demand where a quota binds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.catalog import gpu_product
from tessera.planner.plan import Plan, TaskPlan


class InstanceQuota(BaseModel):
    """At most `limit` MIG instances of `mig_profile` over the plan's systems `systems` (their keys)."""

    model_config = ConfigDict(frozen=True)

    systems: frozenset[str] = Field(min_length=1)
    mig_profile: str = Field(min_length=1)
    limit: int = Field(ge=0)
    source: str = Field(default="", max_length=512, description="Where it comes from, for messages.")


def instances_under(quota: InstanceQuota, plan: Plan) -> int:
    """The plan's instances that count against the quota."""
    return instances_of(quota, plan.tasks)


def instances_of(quota: InstanceQuota, tasks: Iterable[TaskPlan]) -> int:
    """The tasks' instances that count against the quota."""
    return sum(c.replicas for t in tasks if t.system in quota.systems for c in t.configs
               if c.segment.mig_profile == quota.mig_profile)


def quota_violations(plan: Plan, quotas: Iterable[InstanceQuota]) -> list[str]:
    return [f"{instances_under(q, plan)} {q.mig_profile} instances for {', '.join(sorted(q.systems))}, over the "
            f"quota of {q.limit}{f' ({q.source})' if q.source else ''}"
            for q in quotas if instances_under(q, plan) > q.limit]


def binding(plan: Plan, quotas: Sequence[InstanceQuota]) -> list[InstanceQuota]:
    """The quotas the plan uses to the full: where a system served below its demand was held back."""
    return [q for q in quotas if instances_under(q, plan) >= q.limit]


def holding_back(plan: Plan, quotas: Sequence[InstanceQuota], system: str) -> list[InstanceQuota]:
    """The quotas that hold `system` below its demand: those of a positive limit the plan uses to the full.

    A quota of 0 is a choice of profiles, not a cap on how much (a namespace kept to small instances
    with every other profile at 0): it holds a system back only where the quotas leave it no profile
    of the plan's GPU at all, and then all of them do.
    """
    mine = [q for q in quotas if system in q.systems]
    closed = {q.mig_profile for q in mine if q.limit == 0}
    if closed >= {p.name for p in gpu_product(plan.gpu).profiles}:
        return mine
    return [q for q in binding(plan, mine) if q.limit > 0]
