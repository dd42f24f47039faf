"""kopf registrations only: every handler hands the event to the controller.

Only event handlers (`kopf.on.event`) are used: they keep no progress or
diff-base state on the objects, so kopf itself writes nothing to them (no
annotation to outgrow, no write at idle), and there is no finalizer: garbage
collection removes a deleted system's children, and its delete event makes
the pool plan again.
"""

from __future__ import annotations

import kopf

from tessera.operator import naming
from tessera.operator.entry import process
from tessera.operator.entry.fingerprints import (adapter_pool_fingerprint, adapter_server_pod_fingerprint,
                                                  deployment_fingerprint, job_fingerprint, node_fingerprint,
                                                  system_fingerprint)
from tessera.operator.reconcile.adapter_pool_decide import SERVER_COMPONENT
from tessera.operator.api.adapter_pools import PLURAL as ADAPTER_POOLS
from tessera.operator.api.systems import PLURAL

REGISTRY = kopf.OperatorRegistry()
"""The handlers below, handed to `kopf.run` (no import for its side effect on kopf's default registry)."""


@kopf.on.login(registry=REGISTRY)
def login(memo: kopf.Memo, **kwargs):
    return process.login(memo, **kwargs)


@kopf.on.startup(registry=REGISTRY)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    await process.start(settings, memo)


@kopf.on.cleanup(registry=REGISTRY)
async def cleanup(memo: kopf.Memo, **_) -> None:
    await process.stop(memo)


@kopf.on.event(naming.GROUP, "v1alpha1", PLURAL, registry=REGISTRY)
async def system_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("system", *system_fingerprint(body, type))


@kopf.on.event(naming.GROUP, "v1alpha1", ADAPTER_POOLS, registry=REGISTRY)
async def adapter_pool_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("adapterpool", *adapter_pool_fingerprint(body, type))


@kopf.on.event("", "v1", "nodes", registry=REGISTRY)
async def node_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("node", *node_fingerprint(body, type))


@kopf.on.event("apps", "v1", "deployments", labels={naming.MANAGED_BY: naming.MANAGED_BY_VALUE}, registry=REGISTRY)
async def server_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("deployment", *deployment_fingerprint(body, type))


@kopf.on.event("batch", "v1", "jobs", labels={naming.MANAGED_BY: naming.MANAGED_BY_VALUE}, registry=REGISTRY)
async def profiler_job_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("job", *job_fingerprint(body, type))


@kopf.on.event("", "v1", "pods", registry=REGISTRY,
               labels={naming.MANAGED_BY: naming.MANAGED_BY_VALUE, naming.CHILD_KIND_LABEL: SERVER_COMPONENT})
async def adapter_server_pod_changed(memo: kopf.Memo, body, type, **_) -> None:
    memo.controller.trigger("pod", *adapter_server_pod_fingerprint(body, type))
