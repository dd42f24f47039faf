"""Start-up of the kopf operator: settings, the controller, probes and the metrics server."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import kopf
from aiohttp import web
from kubernetes import client, config
from prometheus_client import start_http_server

from tessera import __version__
from tessera.logs import configure_logging
from tessera.operator import naming
from tessera.operator.cluster import Cluster, build_client_validators
from tessera.operator.controller import Controller
from tessera.operator.leader import LeaderElector, LeaseTiming, guard_writes
from tessera.operator.pools import MIG_PREFIX
from tessera.operator.reconcile import Reconciler
from tessera.operator.settings import OperatorSettings
from tessera.operator.testhooks import checkpoint

log = logging.getLogger("tessera.operator")
STALE_AFTER_RESYNCS = 5
"""Liveness fails when no reconcile succeeded for this many resync periods."""

USER_AGENT = "tessera-operator"
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_settings: OperatorSettings | None = None
_kubeconfig: str | None = None


def run(settings: OperatorSettings, kubeconfig: str | None) -> None:
    """Runs the operator until it is stopped (SIGTERM/SIGINT)."""
    global _settings, _kubeconfig
    _settings, _kubeconfig = settings, kubeconfig
    # The operator logs each decision at info; kopf only its warnings (one line per watch event is noise),
    # but at debug its info too: each watch event and handler run, for a look at what triggers what.
    tessera_level = logging.getLogger("tessera").getEffectiveLevel()
    libraries = "info" if tessera_level <= logging.DEBUG else "warning"
    configure_logging(logging.getLevelName(min(tessera_level, logging.INFO)), libraries=libraries)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig  # kopf's own login reads it too
    build_client_validators()
    from tessera.operator import handlers  # noqa: F401  (registers the handlers)

    kopf.run(standalone=True, clusterwide=not settings.namespaces, namespaces=settings.namespaces)


def login(**kwargs) -> kopf.ConnectionInfo | None:
    """kopf's credentials: the --kubeconfig file when given, else in cluster (or the default kubeconfig)."""
    if _kubeconfig:
        return kopf.login_with_kubeconfig(**kwargs)  # reads KUBECONFIG now, not at import
    return kopf.login_via_client(**kwargs)


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """Out of cluster with a kubeconfig, else in cluster with the service account."""
    if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        api = config.new_client_from_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
        api = client.ApiClient()
    api.user_agent = f"{USER_AGENT}/{__version__}"  # what the API server's audit log names it by
    return api


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # no Event per log line: tessera posts its own decisions
    settings.peering.standalone = True
    # Event handlers keep no state; should a state-keeping handler ever be added, keep it small and apart.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.tessera.ai")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="kopf.tessera.ai")
    settings.watching.server_timeout = 300
    # No CRD/namespace watching for discovery: the resources are known, and it would need cluster-wide RBAC.
    settings.scanning.disabled = True


async def start(kopf_settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    configure_kopf(kopf_settings)
    settings = _settings or OperatorSettings()
    elector = LeaderElector(api_client(_kubeconfig), lease_namespace(settings),
                            timing=LeaseTiming.for_duration(settings.lease_duration_s))
    writer = api_client(_kubeconfig)
    guard_writes(writer, elector)  # every write of the operator needs the Lease
    cluster = Cluster(writer, settings)
    controller = Controller(Reconciler(cluster, settings), settings)
    memo.controller, memo.elector = controller, elector
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr="0.0.0.0")
    if settings.health_port:
        memo.probes = await start_probes(controller, settings, elector)
    memo.leading = asyncio.create_task(lead(elector, controller), name="tessera-leader")


async def lead(elector: LeaderElector, controller: Controller) -> None:
    """Reconciles only once the Lease is taken; a lost Lease stops the process (kubelet restarts it)."""
    await elector.acquire()
    controller.last_success = time.monotonic()  # liveness counts from leading, not from a standby's start
    checkpoint("startup")
    controller.start()
    controller.trigger("startup")
    await elector.keep(on_lost=lambda: os.kill(os.getpid(), signal.SIGTERM))


def lease_namespace(settings: OperatorSettings) -> str:
    if settings.leader_election_namespace:
        return settings.leader_election_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if os.environ.get("KUBERNETES_SERVICE_HOST") and POD_NAMESPACE_FILE.exists():
        return POD_NAMESPACE_FILE.read_text().strip()
    return settings.state_namespace


async def stop(memo: kopf.Memo) -> None:
    memo.leading.cancel()
    await asyncio.gather(memo.leading, return_exceptions=True)
    await memo.controller.stop()
    await asyncio.to_thread(memo.elector.release)
    if getattr(memo, "probes", None) is not None:
        await memo.probes.cleanup()


async def start_probes(controller: Controller, settings: OperatorSettings, elector: LeaderElector) -> web.AppRunner:
    """/healthz: the loop answers and (when leading) reconciles succeed; /readyz: the first reconcile is done,
    or this operator is a standby (ready to take over: a rolling update must not wait for it to lead)."""

    async def healthz(_request):
        if not elector.may_write():
            return web.Response(text="standby\n")
        stale = time.monotonic() - controller.last_success > STALE_AFTER_RESYNCS * settings.resync_s
        return web.Response(status=500 if stale and not controller.reconciling else 200,
                            text="stale\n" if stale else "ok\n")

    async def readyz(_request):
        if not elector.may_write():
            return web.Response(text="standby\n")
        return web.Response(status=200 if controller.ready else 503, text="ready\n" if controller.ready else "starting\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", settings.health_port).start()
    return runner


# -- what of an object matters to the plan (unchanged fingerprint: no reconcile) ----

def _key(body, kind: str) -> str:
    metadata = body.get("metadata") or {}
    return f"{kind}/{metadata.get('namespace', '')}/{metadata.get('name')}"


def system_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    # Status is tessera's own writing: only a spec change (generation), a deletion or a status that
    # someone else changed (observedGeneration lagging) asks for a reconcile.
    return _key(body, "system"), (event_type == "DELETED", metadata.get("uid"), metadata.get("generation"),
                                  (metadata.get("annotations") or {}).get("tessera.ai/gpu-product"),
                                  status.get("observedGeneration"))


def node_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    relevant = {k: v for k, v in labels.items() if k.startswith(("nvidia.com/", "kubernetes.io/hostname"))}
    conditions = (body.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    allocatable = {k: v for k, v in ((body.get("status") or {}).get("allocatable") or {}).items()
                   if k.startswith(MIG_PREFIX) or k == "nvidia.com/gpu"}
    return _key(body, "node"), (event_type == "DELETED", metadata.get("uid"), sorted(relevant.items()),
                                (body.get("spec") or {}).get("unschedulable"), ready, sorted(allocatable.items()),
                                (metadata.get("annotations") or {}).get(naming.MIG_CONFIG_REQUESTED))


def deployment_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    return _key(body, "deployment"), (event_type == "DELETED", metadata.get("uid"), metadata.get("generation"),
                                      (metadata.get("annotations") or {}).get(naming.APPLIED_HASH),
                                      status.get("availableReplicas"), status.get("updatedReplicas"),
                                      status.get("observedGeneration"))


def job_fingerprint(body, event_type: str | None) -> tuple[str, object]:
    """A profiler Job matters when it appears, finishes or goes: its result is read then."""
    metadata = body.get("metadata") or {}
    finished = sorted(c.get("type") for c in (body.get("status") or {}).get("conditions") or []
                      if c.get("type") in ("Complete", "Failed") and c.get("status") == "True")
    return _key(body, "job"), (event_type == "DELETED", metadata.get("uid"), finished)
