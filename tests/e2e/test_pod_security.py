"""tessera's pods under the `restricted` Pod Security Standard, on the real API server's PodSecurity admission.

PodSecurity checks pods, not their Deployments or Jobs: a Deployment the
standard forbids is created fine, and only its ReplicaSet's pods are refused
(a FailedCreate Event). So the test waits for the pods themselves, model
servers and profiler Jobs', in a namespace labelled
`pod-security.kubernetes.io/enforce: restricted`. What admission cannot
check here: `runAsNonRoot` against an image that runs as root fails only at
the kubelet, which KWOK lacks; the image's user requirement is in
docs/model-server-contract.md.
"""

from __future__ import annotations

from kubernetes import client

from cluster.kube import wait_for

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .test_profiler_jobs import TIMEOUT_S, one_variant_system, profiler_jobs, profiling  # noqa: F401  (fixture)

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}


def test_model_server_and_profiler_pods_are_admitted_in_a_namespace_enforcing_restricted(
        profiling, core, api_client, kubectl):
    operator, kubelet = profiling()
    core.patch_namespace(operator.namespace, {"metadata": {"labels": RESTRICTED}})
    kubectl("apply", "-n", operator.namespace, "-f", "-",
            input=one_variant_system("restricted", "resnet50", "example.org/resnet50:1"))
    batch = client.BatchV1Api(api_client)

    def pods_of(component: str) -> list[client.V1Pod]:
        return core.list_namespaced_pod(
            operator.namespace, label_selector=f"app.kubernetes.io/managed-by=tessera,tessera.ai/component={component}"
        ).items

    jobs = wait_for(lambda: profiler_jobs(batch, operator.namespace), TIMEOUT_S, "profiler Jobs")
    wait_for(lambda: pods_of("profiler"), 60, f"a pod of the profiler Jobs {[j.metadata.name for j in jobs]}")
    wait_for(lambda: core.list_namespaced_pod(operator.namespace, label_selector="tessera.ai/deployment").items,
             TIMEOUT_S, "a model-server pod")
    refused = [(e.involved_object.kind, e.involved_object.name, e.message)
               for e in core.list_namespaced_event(operator.namespace).items if e.reason == "FailedCreate"]
    assert refused == []
    assert operator.alive()
