"""`tessera operator`'s process: logging, the client validators, then kopf with the handlers registered."""

from __future__ import annotations

import logging
import os

import kopf

from tessera.logs import configure_logging
from tessera.operator.cluster import build_client_validators
from tessera.operator.entry import handlers
from tessera.operator.settings import OperatorSettings


def run(settings: OperatorSettings, kubeconfig: str | None) -> None:
    """Runs the operator until it is stopped (SIGTERM/SIGINT)."""
    # The operator logs each decision at info; kopf only its warnings (one line per watch event is noise).
    tessera_level = logging.getLogger("tessera").getEffectiveLevel()
    configure_logging(logging.getLevelName(min(tessera_level, logging.INFO)), libraries="warning")
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig  # kopf's own login reads it too
    build_client_validators()
    # The settings and kubeconfig travel in kopf's memo (every handler is handed it), not in module globals.
    kopf.run(standalone=True, clusterwide=not settings.namespaces, namespaces=settings.namespaces,
             registry=handlers.REGISTRY, memo=kopf.Memo(settings=settings, kubeconfig=kubeconfig))
