"""An AdapterPool placed for the per-adapter rates its demandSource measures, end to end (docs/demand.md).

A real Prometheus (tests/cluster/prometheus.py) scrapes test_demand.py's
exporter of request counters per (namespace, model, replica), `model` the
adapter's name, as the endpoint picker's `model_name` is; the pool's query
sums `rate(...)` by model. Another namespace's series, 100 times hotter, are
there too: confinement keeps them out. The pool's adapters have no expectedRequestsPerSecond: what it is
placed for can only come from the readings. The rate change is a tenth of the
adapters 10% hotter (that a fresh placement would move many more is
test_adapter_pool_demand.py's, on 200 adapters: on these 60 measured rates
it depends on the readings' jitter); which server holds an adapter
is what the vLLM stand-in says each pod registered.
"""

from __future__ import annotations

import json
import random

import yaml
from kubernetes import client

from cluster.kube import wait_for
from tessera.operator.demand.hysteresis import TOLERANCE

from .operator_fixtures import crds, custom, run_operator, s3_store, vllm, weights  # noqa: F401  (fixtures)
from .test_demand import METRIC, tenant_prometheus  # noqa: F401  (fixture)
from .test_adapter_pools import POOL_FILE, adapter_pool, wait_pool_ready
from .test_adapter_replacement import MOST_MOVED, holding, rolled_out, server_states

QUERY = f"sum by (model) (rate({METRIC}_total[5s]))"
WAIT_S = 90
HOTTER = 1.1
RATE_TOLERANCE = 0.1
"""The rates placed for are the measured ones within this share (rate() over 5 s of a 1 s scrape jitters)."""


def rates_of(document: dict) -> dict[str, float]:
    return {a["name"]: a["expectedRequestsPerSecond"] for a in document["spec"]["adapters"]}


def measured_only(document: dict) -> dict:
    """The pool with a demandSource and no adapter's expected rate."""
    adapters = [{k: v for k, v in a.items() if k != "expectedRequestsPerSecond"} for a in document["spec"]["adapters"]]
    return {**document, "spec": {**document["spec"], "adapters": adapters, "demandSource": {"query": QUERY,
                                                                                   "adapterLabel": "model"}}}


def placed_for(core, custom, namespace: str) -> dict[str, float]:
    """The rates the operator placed for, as its placement ConfigMap (named in status) records them."""
    name = (((adapter_pool(custom, namespace) or {}).get("status") or {}).get("plan") or {}).get(
        "placementConfigMapName")
    if name is None:
        return {}
    try:
        record = core.read_namespaced_config_map(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return {}
        raise
    return json.loads((record.data or {}).get("rates.json", "{}"))


def close(placed: dict[str, float], wanted: dict[str, float]) -> bool:
    return placed.keys() == wanted.keys() and all(
        abs(placed[name] - rate) <= RATE_TOLERANCE * rate for name, rate in wanted.items())


def test_a_pool_is_placed_for_its_measured_rates_and_a_10_percent_change_moves_few_adapters(
        run_operator, tenant_prometheus, core, custom, kubectl, vllm):
    exporter, prom = tenant_prometheus
    operator = run_operator(nodes=1, adapter_servers=vllm)
    operator.extra_args += ["--prometheus-url", prom.url, "--prometheus-timeout", "2", "--demand-poll", "1"]
    namespace = operator.namespace
    document = yaml.safe_load(POOL_FILE.read_text())
    for name, rate in rates_of(document).items():
        exporter.set_rate((namespace, name, "a"), rate)
        exporter.set_rate(("other-tenant", name, "a"), 100 * rate)  # another namespace's series: never read
    prom.wait_for(f'count(rate({METRIC}_total{{namespace="{namespace}"}}[5s]) > 0) == 60', timeout=60)
    operator.start()
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(measured_only(document)))
    found = wait_pool_ready(custom, operator, kubectl)

    def measured():
        status = (adapter_pool(custom, namespace) or {}).get("status") or {}
        metrics = next((c for c in status.get("conditions") or [] if c["type"] == "MetricsAvailable"), {})
        return status if (metrics.get("status") == "True" and (status.get("demand") or {}).get("adaptersMeasured")
                          == 60 and close(placed_for(core, custom, namespace), rates_of(document))) else None
    try:
        status = wait_for(measured, WAIT_S, "the pool placed for its measured rates", interval=0.5)
    except TimeoutError:
        raise AssertionError(f"{json.dumps((adapter_pool(custom, namespace) or {}).get('status'), indent=1)}\n"
                             f"{placed_for(core, custom, namespace)}\n{operator.log_text()[-3000:]}") from None
    assert status["demand"]["adaptersUnknown"] == 0
    total = sum(rates_of(document).values())
    assert abs(status["demand"]["placedForRequestsPerSecond"] - total) <= RATE_TOLERANCE * total  # not 100x
    found = wait_pool_ready(custom, operator, kubectl)
    before = wait_for(lambda: holding(core, vllm, namespace), WAIT_S, "every server lists its adapters")
    states = server_states(core, namespace)

    placed_before = placed_for(core, custom, namespace)
    hotter = set(random.Random(0).sample(sorted(placed_before), len(placed_before) // 10))
    for name in hotter:
        exporter.set_rate((namespace, name, "a"), HOTTER * rates_of(document)[name])

    def settled():
        """Every hotter adapter placed for more than the hysteresis' tolerance above its rate before, every server
        rolled out, each adapter on one server."""
        placed = placed_for(core, custom, namespace)
        if not all(placed.get(n, 0) > (1 + TOLERANCE) * placed_before[n] for n in hotter) or not rolled_out(
                core, namespace):
            return None
        held = holding(core, vllm, namespace)
        return held if held is not None and held.keys() == before.keys() else None
    after = wait_for(settled, WAIT_S, "the pool re-placed for the hotter rates", interval=0.5)

    moved = sorted(a for a in after if before.get(a) != after[a])
    assert len(moved) <= MOST_MOVED, moved  # the re-placement against the placement in force
    kept = {name: state for name, state in server_states(core, namespace).items() if name in states}
    assert kept == states  # every server runs on: same generation, pod-template hash and pod
    assert found["metadata"]["generation"] == (adapter_pool(custom, namespace) or {})["metadata"]["generation"]
