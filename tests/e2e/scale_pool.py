"""An AdapterPool of many adapters, built in code: mixed ranks, skewed rates, short and long names.

Shared by tests/e2e/test_adapter_pool_scale.py (200 adapters, in the test
command) and bench/adapter_pool_scale.py (2,000), so both apply the same
kind of pool. The base model, image and limits are the example's
(examples/adapter-pools/support-bots.yaml, so its name too); the adapters are
generated here.
"""

from __future__ import annotations

import random

import yaml

from cluster.weights_store import adapter_weights

from tessera.operator import naming
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.reconcile.adapter_pool_decide import within
from tessera.operator.reconcile.adapter_routes import ADAPTER_LABEL, ROUTE_COMPONENT
from tessera.planner.placement import place
from tessera.planner.placement.pool_file import problem_from_spec, spec_from_object

from .operator_harness import EXAMPLES

EXAMPLE = EXAMPLES / "adapter-pools" / "support-bots.yaml"
RANKS = (8, 16, 32, 64)
TOPICS = ("billing", "returns", "shipping", "warranty", "sales", "onboarding")
LONG_EVERY = 2
"""Every other adapter has a long name: `<pool>-<adapter>` is over 63 characters, so its route takes the hashed
name, and the pool's status counts it among the routes named otherwise and lists the first 32 of those."""
LONG_MIDDLE = "assistant-for-the-regional-support-desk"


def adapter_name(index: int) -> str:
    topic = TOPICS[index % len(TOPICS)]
    return f"{topic}-{LONG_MIDDLE}-{index:04d}" if index % LONG_EVERY == LONG_EVERY - 1 else f"{topic}-{index:04d}"


def scale_pool(adapters: int, rate_rps: float, max_servers: int, seed: int = 30) -> dict:
    """The example pool with `adapters` generated adapters: ranks 8-64 in turn, expected rates Zipf-like (a few
    hot adapters, a long cold tail) in a shuffled order, summing to about `rate_rps`."""
    document = yaml.safe_load(EXAMPLE.read_text())
    weights = [1 / (i + 1) for i in range(adapters)]
    random.Random(seed).shuffle(weights)
    scale = rate_rps / sum(weights)
    document["spec"]["limits"] = {"maxServers": max_servers}
    document["spec"]["adapters"] = [
        {"name": adapter_name(i), "rank": RANKS[i % len(RANKS)],
         "expectedRequestsPerSecond": round(weights[i] * scale, 4),
         "weights": adapter_weights(adapter_name(i), f"s3://adapters/{adapter_name(i)}")}
        for i in range(adapters)]
    return document


def placed(document: dict, gpus: int) -> dict[str, list[str]]:
    """Each server Deployment's adapters, by the placement the operator makes of the same pool on `gpus` GPUs."""
    problem = problem_from_spec(spec_from_object(document, "spec"))
    name = document["metadata"]["name"]
    return {child_name(name, "server", str(i)): list(s.adapters)
            for i, s in enumerate(place(within(problem, gpus), "tessera").servers)}


PLAN_FIXED_BYTES, SERVER_BYTES, LISTED_BYTES = 1_000, 300, 32 * 160 + 16 * 70
"""What status.plan may take (JSON): its counts, per server its entry (Deployment and node names included), and
the bounded lists of routes named otherwise (32, two names of up to 63 characters each) and unplaced adapters (16)."""


def plan_bound(servers: int) -> int:
    """The bytes status.plan stays under, for any number of adapters: nothing in it grows with them but counts."""
    return PLAN_FIXED_BYTES + SERVER_BYTES * servers + LISTED_BYTES


def kopf_annotation_bytes(obj: dict) -> int:
    """Bytes of kopf's own annotations on the object (its progress and last-handled-configuration, under any
    prefix: kopf.zalando.org by default, kopf.tessera.ai as tessera configures it)."""
    return sum(len(k) + len(v) for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith("kopf."))


def routes(core, discovery, namespace: str, pool: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each adapter's route: its Service's name, and the pods its EndpointSlice lists (by the adapter label)."""
    selector = f"{naming.POOL_LABEL}={pool},{naming.CHILD_KIND_LABEL}={ROUTE_COMPONENT}"
    services = {s.metadata.labels[ADAPTER_LABEL]: s.metadata.name
                for s in core.list_namespaced_service(namespace, label_selector=selector).items}
    slices = {s.metadata.labels[ADAPTER_LABEL]: sorted(e.target_ref.name for e in s.endpoints or [])
              for s in discovery.list_namespaced_endpoint_slice(namespace, label_selector=selector).items}
    return services, slices
