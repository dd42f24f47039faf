"""kopf registrations only: every handler hands the event to the controller.

Only event handlers (`kopf.on.event`) are used: they keep no progress or
diff-base state on the objects, so kopf itself writes nothing to them (no
annotation to outgrow, no write at idle), and there is no finalizer: garbage
collection removes a deleted system's children, and its delete event makes
the pool plan again.
"""

from __future__ import annotations

import kopf

from tessera.operator import main, naming
from tessera.operator.systems import PLURAL


@kopf.on.login()
def login(**kwargs):
    return main.login(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    await main.start(settings, memo)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_) -> None:
    await main.stop(memo)


@kopf.on.event(naming.GROUP, "v1alpha1", PLURAL)
async def system_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("system", *main.system_fingerprint(body, type))


@kopf.on.event("", "v1", "nodes")
async def node_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("node", *main.node_fingerprint(body, type))


@kopf.on.event("apps", "v1", "deployments", labels={naming.MANAGED_BY: naming.MANAGED_BY_VALUE})
async def server_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("deployment", *main.deployment_fingerprint(body, type), inputs=False)


@kopf.on.event("batch", "v1", "jobs", labels={naming.MANAGED_BY: naming.MANAGED_BY_VALUE})
async def profiler_job_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("job", *main.job_fingerprint(body, type), inputs=False)
