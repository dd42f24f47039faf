"""The operator process under kopf: credentials, start-up (Lease, controller, probes, metrics) and shut-down.

The settings and the kubeconfig come in kopf's memo (`main.run` puts them
there); what start-up makes (the controller, the elector, the probes) goes
into the same memo for the handlers and `stop`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from tessera import __version__
from tessera.operator.cluster import Cluster
from tessera.operator.entry.controller import Controller
from tessera.operator.entry.health import start_probes
from tessera.operator.entry.leader import LeaderElector, LeaseTiming, guard_writes
from tessera.operator.reconcile.reconciler import Reconciler
from tessera.operator.reconcile.snapshot import ADAPTER_SERVER_PODS
from tessera.operator.settings import OperatorSettings
from tessera.operator.testhooks import checkpoint
from tessera.planner.worker import warm_up

USER_AGENT = "tessera-operator"
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def login(memo: kopf.Memo, **kwargs) -> kopf.ConnectionInfo | None:
    """kopf's credentials: the --kubeconfig file when given, else in cluster (or the default kubeconfig)."""
    if memo.get("kubeconfig"):
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
    # Pods are watched only for the AdapterPools' servers: the API server filters them, so the operator is not
    # sent every pod event of the cluster (the handler's own label filter alone would be applied after that).
    settings.watching.label_selectors["v1", "pods"] = ADAPTER_SERVER_PODS
    # No CRD/namespace watching for discovery: the resources are known, and it would need cluster-wide RBAC.
    settings.scanning.disabled = True


async def start(kopf_settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    configure_kopf(kopf_settings)
    settings: OperatorSettings = memo.get("settings") or OperatorSettings()
    kubeconfig: str | None = memo.get("kubeconfig")
    elector = LeaderElector(api_client(kubeconfig), lease_namespace(settings),
                            timing=LeaseTiming.for_duration(settings.lease_duration_s))
    writer = api_client(kubeconfig)
    guard_writes(writer, elector)  # every write of the operator needs the Lease
    cluster = Cluster(writer, settings)
    controller = Controller(Reconciler(cluster, settings), settings)
    memo.controller, memo.elector = controller, elector
    warm_up()  # the first solve's worker imports the planner now, while the Lease is taken
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
