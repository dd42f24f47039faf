"""The operator's preflight on the real test cluster: what it depends on, missing, is said on the systems.

The operator runs as in test_operator.py, but told that the GPU Operator
lives in a namespace that does not exist yet and to watch a second namespace
that does not exist either. Both are then created: the condition turns True,
which also shows that the CRDs as the API server serves them compare equal
to the ones this operator generates (a false `CrdOutdated` would keep it
False).
"""

from __future__ import annotations

import json
import uuid

from kubernetes.client.rest import ApiException

from cluster.kube import ensure_namespace, wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, condition, systems

MIG_LABEL = "nvidia.com/mig.config"


def prerequisites(custom, namespace: str) -> dict | None:
    found = systems(custom, namespace).get("single-model")
    return condition(found, "PrerequisitesMet") if found else None


def test_missing_prerequisites_are_reported_on_the_systems_until_they_exist(run_operator, core, custom, kubectl):
    operator = run_operator(nodes=1)
    gpu_namespace, watched = f"gpu-{uuid.uuid4().hex[:5]}", f"watched-{uuid.uuid4().hex[:5]}"
    operator.extra_args += ["--gpu-operator-namespace", gpu_namespace, "--namespace", watched]
    labels_before = {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in operator.pool.nodes}
    operator.start()
    kubectl("apply", "-n", operator.namespace, "-f", str(EXAMPLES / "single-model.yaml"))
    try:
        missing = wait_for(lambda: (c := prerequisites(custom, operator.namespace)) and c["status"] == "False" and c,
                           120, "PrerequisitesMet=False")
        assert missing["reason"] == "GpuOperatorNamespaceMissing"
        assert repr(gpu_namespace) in missing["message"] and repr(watched) in missing["message"]
        events = json.loads(kubectl("get", "events", "-n", operator.namespace, "-o", "json").stdout)["items"]
        assert {(e["type"], e["reason"]) for e in events if e["involvedObject"]["name"] == "single-model"} >= {
            ("Warning", "GpuOperatorNamespaceMissing")}
        log = operator.log.read_text()
        assert f"preflight: the GPU Operator's namespace {gpu_namespace!r} does not exist" in log
        assert f"preflight: watched namespace {watched!r} does not exist" in log
        # Nowhere to write the MIG configs: no node was relabelled for a config mig-manager could not read.
        assert {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in operator.pool.nodes} == labels_before
        assert operator.alive()

        ensure_namespace(core, gpu_namespace)
        ensure_namespace(core, watched)
        present = wait_for(lambda: (c := prerequisites(custom, operator.namespace)) and c["status"] == "True" and c,
                           60, "PrerequisitesMet=True once both namespaces exist")
        assert present["reason"] == "AllPresent", present
    finally:
        for namespace in (gpu_namespace, watched):
            try:
                core.delete_namespace(namespace)
            except ApiException as error:
                if error.status != 404:  # 404: never created, the test failed before
                    raise
