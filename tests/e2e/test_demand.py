"""Demand from the real Prometheus of the test fixtures, end to end (docs/demand.md).

A tenant exporter serves request counters labelled by namespace; Debian's
Prometheus scrapes it every second; the operator reads `rate(...[5s])`. The
scale-down window is 8 s, so a reading taken as zero WOULD scale down within
each bad-data phase below: the replica counts staying put is not vacuous.
"""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
import yaml
from kubernetes import client
from prometheus_client.core import CounterMetricFamily

from cluster.kube import wait_for
from cluster.prometheus import DemandExporter, Prometheus

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, MANAGED, audit_lines, condition, operator_writes, systems, wait_ready

METRIC = "tessera_test_requests"
TOKEN = "tessera-test-token-7f3a9c"
QUERY = f'rate({METRIC}_total{{model="classifier"}}[5s])'
NOSY_QUERY = f'sum(rate({METRIC}_total{{namespace="other-tenant",model="secret"}}[5s]))'
READY_TIMEOUT_S = 240
RATE_UP = 6000.0


class TenantExporter(DemandExporter):
    """Request counters per (namespace, model, replica); a series can be NaN or absent."""

    def __init__(self) -> None:
        super().__init__()
        self.nan: set[tuple] = set()
        self.hidden: set[tuple] = set()  # counting on, but not exported

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._advance()
            self._rates.pop(key, None)
            self._totals.pop(key, None)

    def collect(self):
        with self._lock:
            self._advance()
            total = CounterMetricFamily(METRIC, "Requests (tenant demand for tests).",
                                        labels=["namespace", "model", "replica"])
            for key in sorted(set(self._rates) - self.hidden):
                total.add_metric(list(key), math.nan if key in self.nan else self._totals[key])
        yield total


@pytest.fixture(scope="module")
def tenant_prometheus(tmp_path_factory):
    exporter = TenantExporter().start()
    prom = Prometheus(tmp_path_factory.mktemp("tenant-prometheus"), {"tenants": exporter.address}).start()
    prom.wait_for('up{job="tenants"} == 1', timeout=60)
    yield exporter, prom
    prom.stop()
    exporter.stop()


def _system(name: str, query: str) -> str:
    document = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["demandSource"] = {"query": query}
    return yaml.safe_dump(document)


def _deployments(api_client, namespace: str, system: str) -> list:
    found = client.AppsV1Api(api_client).list_namespaced_deployment(namespace, label_selector=MANAGED).items
    return [d for d in found if any(o.name == system for o in d.metadata.owner_references or [])]


def _replicas(api_client, namespace: str, system: str) -> int:
    return sum(d.spec.replicas for d in _deployments(api_client, namespace, system))


def _running(api_client, namespace: str, system: str) -> int:
    return sum(d.status.available_replicas or 0 for d in _deployments(api_client, namespace, system))


def _slices(custom, namespace: str, system: str) -> int:
    return ((systems(custom, namespace)[system].get("status") or {}).get("plan") or {}).get("slices", 0)


def _demand(custom, namespace: str) -> dict:
    return (systems(custom, namespace)["classifier"].get("status") or {}).get("demand") or {}


def _plans_the_step(custom, namespace: str) -> bool:
    planned = (systems(custom, namespace)["classifier"].get("status") or {}).get("plan") or {}
    return abs(planned.get("demandRequestsPerSecond", 0) - RATE_UP) < 0.05 * RATE_UP


def _reads_the_step(custom, namespace: str) -> bool:
    """The last reading is the step's rate again (a fresh rate window reads low for a few seconds)."""
    return abs((_demand(custom, namespace).get("observedRequestsPerSecond") or 0) - RATE_UP) < 0.05 * RATE_UP


def _metrics(custom, namespace: str, name: str) -> dict | None:
    return condition(systems(custom, namespace).get(name, {}), "MetricsAvailable")


def _wait_metrics(custom, operator, name: str, status: str, reason: str, timeout: float = 60) -> dict:
    def reached():
        if not operator.alive():
            raise AssertionError(f"operator exited:\n{operator.log_text()}")
        found = _metrics(custom, operator.namespace, name)
        return found if found and (found["status"], found["reason"]) == (status, reason) else None
    try:
        return wait_for(reached, timeout, f"MetricsAvailable {status} {reason}", interval=0.5)
    except TimeoutError:
        raise AssertionError(f"{_metrics(custom, operator.namespace, name)}\n{operator.log_text()}") from None


def _wait(custom, operator, check, timeout: float, what: str):
    try:
        return wait_for(check, timeout, what, interval=0.5)
    except TimeoutError:
        statuses = {n: s.get("status") for n, s in systems(custom, operator.namespace).items()}
        raise AssertionError(f"timed out after {timeout}s waiting for {what}: {json.dumps(statuses, indent=1)}\n"
                             f"{operator.log_text()}") from None


def _hold_without_scale_down(api_client, custom, namespace: str, system: str, replicas: int, slices: int,
                             seconds: float) -> None:
    """Longer than the scale-down window: neither replicas nor planned capacity drop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert _replicas(api_client, namespace, system) >= replicas
        assert _slices(custom, namespace, system) >= slices
        time.sleep(0.5)


def test_demand_from_prometheus_scales_up_and_never_down_on_bad_data(
        run_operator, tenant_prometheus, custom, api_client, kubectl, core, tmp_path):
    exporter, prom = tenant_prometheus
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    operator = run_operator(nodes=2)
    operator.extra_args = ["--prometheus-url", prom.url, "--prometheus-token-file", str(token_file),
                           "--prometheus-timeout", "2", "--demand-poll", "1", "--scale-down-stabilization", "8",
                           "--repartition-window", "0"]
    ns = operator.namespace
    series = (ns, "classifier", "a")
    exporter.set_rate(series, 200.0)
    exporter.set_rate(("other-tenant", "secret", "a"), 5000.0)  # another namespace's series, never read
    operator.start()
    kubectl("apply", "-n", ns, "-f", "-", input=_system("classifier", QUERY))
    kubectl("apply", "-n", ns, "-f", "-", input=_system("nosy", NOSY_QUERY))
    wait_ready(custom, ns, ["classifier"], READY_TIMEOUT_S, operator)
    _wait_metrics(custom, operator, "classifier", "True", "DemandRead")
    before = _slices(custom, ns, "classifier")
    assert before >= 1 and _replicas(api_client, ns, "classifier") >= 1

    # A step up: more capacity (compute slices of MIG instances), its replicas Running.
    exporter.set_rate(series, RATE_UP)
    _wait(custom, operator, lambda: _slices(custom, ns, "classifier") > before, 90, "more capacity after a step up")
    # The plan made for the step's rate: readings on the way up may be planned first (a solve that replaced a
    # cancelled one runs to its end, the newer reading is planned right after it: docs/operator.md), and the
    # servers of such a plan may be Ready before the step's plan re-partitions their node.
    _wait(custom, operator, lambda: _plans_the_step(custom, ns), 90, "the plan made for the step's rate")
    # Make before break: the previous plan's servers serve until the step's replicas are available (or their
    # node's turn to change comes), so the replicas counted here are those of the step's plan once it is Ready
    # (the reconcile that writes Ready has removed the previous plan's servers first).
    wait_ready(custom, ns, ["classifier"], READY_TIMEOUT_S, operator)
    up = _replicas(api_client, ns, "classifier")
    _wait(custom, operator, lambda: _running(api_client, ns, "classifier") >= up, READY_TIMEOUT_S,
          "the new replicas Running")

    # The tenant's query naming another namespace's series reads nothing of it.
    _wait_metrics(custom, operator, "nosy", "False", "NoData")
    assert "observedRequestsPerSecond" not in systems(custom, ns)["nosy"]["status"]["demand"]

    # Bad data, each longer than the scale-down window: Unknown, no scale-down, then recovery.
    def bad_phase(reason: str, spoil, mend) -> None:
        _wait(custom, operator, lambda: _reads_the_step(custom, ns), 60, "readings back at the step's rate")
        replicas, slices = _replicas(api_client, ns, "classifier"), _slices(custom, ns, "classifier")
        scaled_down = _demand(custom, ns).get("lastScaleDownTime")
        spoil()
        _wait_metrics(custom, operator, "classifier", "False", reason)
        _hold_without_scale_down(api_client, custom, ns, "classifier", replicas, slices, seconds=12)
        assert _demand(custom, ns).get("lastScaleDownTime") == scaled_down
        mend()
        _wait_metrics(custom, operator, "classifier", "True", "DemandRead")

    bad_phase("PrometheusUnreachable", prom.stop, lambda: (prom.start(), prom.wait_for('up{job="tenants"} == 1')))
    bad_phase("NoData", lambda: exporter.hidden.add(series), lambda: exporter.hidden.discard(series))
    bad_phase("NotANumber", lambda: exporter.nan.add(series), lambda: exporter.nan.discard(series))
    second = (ns, "classifier", "b")
    bad_phase("SeveralSeries", lambda: exporter.set_rate(second, 1.0), lambda: exporter.drop(second))
    _wait(custom, operator, lambda: _reads_the_step(custom, ns), 60, "readings back at the step's rate")

    # The token appears in no log, status or Event.
    statuses = json.dumps([s.get("status") for s in systems(custom, ns).values()])
    events = json.dumps([(e.reason, e.message) for e in core.list_namespaced_event(ns).items])
    log = operator.log.read_text(errors="replace")
    assert TOKEN not in log and TOKEN not in statuses and TOKEN not in events
    assert "demand" in statuses and "PrometheusUnreachable" in events and "MetricsAvailable" in log + events


def test_an_idle_resync_with_jittering_demand_patches_no_status(
        run_operator, tenant_prometheus, cluster, custom, kubectl, tmp_path):
    """Readings that move by up to 2% at every poll (checked: several distinct rates read meanwhile) write no
    status: the plan holds, and status shows a reading only once it moves beyond 5% (demand/shown.py)."""
    exporter, prom = tenant_prometheus
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    operator = run_operator(nodes=1, resync_s=3.0)
    operator.extra_args = ["--prometheus-url", prom.url, "--prometheus-token-file", str(token_file),
                           "--demand-poll", "1", "--scale-down-stabilization", "600"]
    ns = operator.namespace
    series = (ns, "classifier", "a")
    exporter.set_rate(series, 200.0)
    stop = threading.Event()

    def jitter() -> None:
        step = 0
        while not stop.wait(0.5):
            step += 1
            exporter.set_rate(series, 200.0 * (1 + 0.02 * math.sin(step)))
    threading.Thread(target=jitter, daemon=True).start()
    try:
        operator.start()
        kubectl("apply", "-n", ns, "-f", "-", input=_system("classifier", QUERY))
        wait_ready(custom, ns, ["classifier"], READY_TIMEOUT_S, operator)
        _wait(custom, operator, lambda: "within" in (_metrics(custom, ns, "classifier") or {}).get("message", ""),
              60, "readings within the plan")
        # With a demand source, each poll is a reconcile (logged "reconciled (requeue"), reading Prometheus.
        reconciles = operator.log.read_text().count("reconciled (")
        start = audit_lines(cluster.audit_log)
        seen = set()
        deadline = time.monotonic() + 60
        while operator.log.read_text().count("reconciled (") < reconciles + 8:
            assert time.monotonic() < deadline, f"no eight reconciles in 60 s:\n{operator.log_text()}"
            seen.update(round(float(r["value"][1]), 3) for r in prom.query(
                f'rate({METRIC}_total{{namespace="{ns}",model="classifier"}}[5s])'))
            time.sleep(0.5)
        assert len(seen) >= 3, f"the readings did not jitter: {seen}"
        assert [w["objectRef"].get("resource") for w in operator_writes(cluster.audit_log, start)] == []
    finally:
        stop.set()
