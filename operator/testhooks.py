"""Named kill points for restart-safety tests.

With TESSERA_TEST_EXIT_AT=<point>[:<n>] in its environment the operator
process exits at once (exit code 17, no clean-up, as a crash or a kill
would leave things) the n-th time (default the first) it reaches <point>.
Unset, `checkpoint` does nothing. The points are listed in KILL_POINTS and
SERVING_CHANGE_POINTS, and in docs/operator.md.
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "TESSERA_TEST_EXIT_AT"
EXIT_CODE = 17
KILL_POINTS = (
    "startup",                  # operator up, before the first reconcile
    "mid-solve",                # the solver process is working on the pool's plan
    "after-solve",              # a plan came back, not yet stored
    "after-plan-stored",        # the pool's plan ConfigMap written
    "after-mig-configmap",      # tessera's MIG configs written into the mig-parted ConfigMap
    "after-node-relabel",       # one node relabelled for its new MIG config
    "after-mig-success",        # before a Deployment: its node reported success, or serves nothing and is changing
    "after-service",            # one Service applied
    "after-deployment",         # one Deployment applied (kill at :2 to stop between two of them)
    "after-stale-delete",       # a child no plan wants deleted
    "after-status",             # one system's status written
    "after-event",              # one Event posted
)
"""Reached by every first install: tests/e2e/test_operator_restarts.py kills the operator at each."""
SERVING_CHANGE_POINTS = (
    "after-cordon",             # a serving node cordoned by tessera, its Deployments still serving
    "after-scale-to-zero",      # one Deployment pinned to the cordoned node scaled to zero
    "after-uncordon",           # tessera's cordon lifted, the node's new Deployments not yet applied
)
"""Reached only while a serving node is re-partitioned: tests/e2e/test_leader_handover.py kills the leader there."""
_reached: dict[str, int] = {}


def checkpoint(point: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] >= int(nth or 1):
        logging.getLogger("tessera.operator").warning("test hook: exiting at kill point %s", point)
        sys.stderr.flush()
        os._exit(EXIT_CODE)
