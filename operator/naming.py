"""Labels, annotations and MIG config names of everything tessera writes, stated once.

Children's names are the API's `child_name` (operator/api/v1alpha1.py,
docs/api-conventions.md). Label values are at most 63 characters; where a
value would be longer, it keeps a readable prefix and ends in a hash of the
whole, so values stay deterministic and distinct. Labels, annotations and
MIG config names carry SCHEMA_VERSION, so a later tessera can tell its own
older objects apart.
"""

from __future__ import annotations

import hashlib
import json
import re

SCHEMA_VERSION = "v1"
FIELD_MANAGER = "tessera"
GROUP = "tessera.ai"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "tessera"
SYSTEM_LABEL = f"{GROUP}/system"
TASK_LABEL = f"{GROUP}/task"
POOL_LABEL = f"{GROUP}/pool"
"""On an AdapterPool's servers: the pool's name (never `tessera.ai/system`, so no system's Service selects them)."""
SCHEMA_LABEL = f"{GROUP}/schema"
CHILD_KIND_LABEL = f"{GROUP}/component"
DEPLOYMENT_LABEL = f"{GROUP}/deployment"
"""On the pods of tessera's Deployments: the Deployment's name (its selector)."""
APPLIED_HASH = f"{GROUP}/applied-hash"
"""Hash of what tessera applied to a child: equal hash, no write (an idle resync writes nothing)."""
MIG_CONFIG_WRITTEN_PREFIX = f"written.{GROUP}/"
"""ConfigMap annotation per tessera MIG config: when it was first written (its propagation clock)."""
MIG_CONFIG_REQUESTED = f"{GROUP}/mig-config-requested"
"""Node annotation: the MIG config tessera last asked mig-manager for."""
PAUSED = f"{GROUP}/paused"
"""On a CompoundInferenceSystem, or on its pool's plan ConfigMap: "true" freezes what runs (docs/operator.md, Pause)."""
APPROVE_MIG_CONFIG = f"{GROUP}/approve-mig-config"
"""On a node: an admin's approval to re-partition it (or cordon it for that) for the MIG config it names."""
CORDONED = f"{GROUP}/cordoned"
"""Node annotation: tessera cordoned the node to re-partition it (its value: the MIG config it changes to); tessera
uncordons only nodes that carry it, never an admin's cordon (operator/reconcile/serving_nodes.py)."""
CHANGE_LOSS = f"{GROUP}/change-loss"
"""Node annotation beside CORDONED, on a node changed without replacement capacity (--without-replacement change):
the replicas lost until it serves again, as the cordon stated them; a later reconcile (a new leader too) states the
loss from it after the Deployments went to zero. Lifted with the cordon."""
SCALED_TO_ZERO = "scaled-to-zero"
"""The applied hash of a Deployment tessera scaled to zero to re-partition its node: the plan's body differs from it,
so the Deployment is applied again once the node's new layout is."""
MIG_FAILURE = f"{GROUP}/mig-failure"
"""Node annotation: the MIG config mig-manager reported `failed` for and when tessera first saw it (JSON), so the
back-off survives a restart (operator/reconcile/mig_failures.py)."""

ADAPTERS_LOADED = f"{GROUP}/adapters-loaded"
"""An AdapterPool server pod's readiness gate: True once its server lists every adapter placed on it."""
LOADED_ADAPTERS = f"{GROUP}/loaded-adapters"
"""On an AdapterPool server pod: how many of its placed adapters its server lists, and a digest of their names."""

MAX_NAME = 63
HASH_CHARS = 8
MIG_CONFIG_PREFIX = f"tessera-{SCHEMA_VERSION}-"


def digest(value: object) -> str:
    """A stable short hash of any JSON-serialisable value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def dns_label(text: str) -> str:
    """A DNS-1035 label (lower case, digits, '-', starting with a letter) of at most 63 characters.

    Characters a label cannot hold become '-' (`object_detection` ->
    `object-detection`); a text too long keeps a readable head and ends in a
    hash of the whole text, so that long names stay distinct.
    """
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"t-{cleaned}".rstrip("-")
    if len(cleaned) <= MAX_NAME:
        return cleaned
    head = cleaned[: MAX_NAME - HASH_CHARS - 1].rstrip("-")
    return f"{head}-{digest(text)[:HASH_CHARS]}"


def label_value(text: str) -> str:
    """A label value (at most 63 characters) that identifies `text`."""
    if len(text) <= MAX_NAME and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", text):
        return text
    return dns_label(text)


def mig_config_name(entries: list[dict[str, object]]) -> str:
    """Content-addressed: the same layout always has the same name, a new layout a new name."""
    return f"{MIG_CONFIG_PREFIX}{digest(entries)[:12]}"


def is_tessera_mig_config(name: str) -> bool:
    return name.startswith("tessera-")


def child_labels(system: str, task: str | None, component: str) -> dict[str, str]:
    labels = {
        MANAGED_BY: MANAGED_BY_VALUE,
        SCHEMA_LABEL: SCHEMA_VERSION,
        SYSTEM_LABEL: label_value(system),
        CHILD_KIND_LABEL: component,
    }
    if task is not None:
        labels[TASK_LABEL] = label_value(task)
    return labels


def pool_child_labels(pool: str, component: str) -> dict[str, str]:
    """Labels of an AdapterPool's children: tessera's, and the pool's name."""
    return {MANAGED_BY: MANAGED_BY_VALUE, SCHEMA_LABEL: SCHEMA_VERSION, POOL_LABEL: label_value(pool),
            CHILD_KIND_LABEL: component}


def selector_labels(system: str, task: str) -> dict[str, str]:
    """What a task's Service selects: every replica of the task, on every node."""
    return {MANAGED_BY: MANAGED_BY_VALUE, SYSTEM_LABEL: label_value(system), TASK_LABEL: label_value(task)}


def env_name(text: str) -> str:
    """An environment variable name part: `car_classification` -> `CAR_CLASSIFICATION`."""
    return re.sub(r"[^A-Z0-9]+", "_", text.upper()).strip("_")
