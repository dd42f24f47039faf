"""Who may use a GPU pool: the namespaces an admin's label selector admits (--pool-namespaces POOL=SELECTOR).

Without a rule a pool is open to every watched namespace, as before. With one,
a system in a namespace the selector does not match is Invalid with the
reason and left out of the pool's solve, so nothing of it is scheduled on the
pool's nodes (the toleration of the pool's taint comes with a plan, and it
gets none). The selector is the API server's own (it lists the namespaces
that match), so its syntax and meaning are Kubernetes', not a copy; one the
API server refuses admits no namespace, and says why. A system that already
runs when its namespace leaves the rule keeps its last good plan, like any
invalid system: tessera deletes no server on a policy change; deleting the
system frees its share. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessera.operator.api.status import POOL_NOT_ALLOWED
from tessera.operator.api.systems import SystemObject


@dataclass(frozen=True)
class Admitted:
    """The namespaces a pool's rule admits, as the API server listed them, or why it could not."""

    selector: str
    namespaces: frozenset[str] = frozenset()
    error: str | None = None


def denied(systems: list[SystemObject], pool_key: str, rules: Mapping[str, Admitted]) -> dict[str, tuple[str, str]]:
    """Systems of the pool whose namespace its rule does not admit: key -> (reason, message)."""
    rule = rules.get(pool_key)
    if rule is None:
        return {}
    out = {}
    for system in systems:
        if system.ref.namespace in rule.namespaces:
            continue
        why = (f"the selector could not be used: {rule.error}" if rule.error is not None
               else f"namespace {system.ref.namespace!r} does not match the selector {rule.selector!r}")
        out[system.ref.key] = (POOL_NOT_ALLOWED, f"GPU pool {pool_key} admits only the namespaces an admin "
                                                 f"selected (--pool-namespaces): {why}")
    return out
