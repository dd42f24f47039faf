"""Small waiting helpers over the kubernetes client, shared by fixtures and tests."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.rest import ApiException


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_crd_established(api_client: client.ApiClient, name: str, timeout: float = 180) -> None:
    """Polls the CRD itself: `kubectl wait --for=condition=Established` exits 1 at once ("conditions accessor
    error") when it reads a CRD whose status has no conditions yet, as a loaded API server can show one."""
    ext = client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)
    wait_for(established, timeout, f"CRD {name} Established")


def ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as e:
        if e.status != 409:
            raise


def has_default_sa(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def wait_node_ready(core: client.CoreV1Api, name: str, timeout: float = 60) -> None:
    def ready():
        conditions = core.read_node(name).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)
    wait_for(ready, timeout, f"node {name} Ready")


def pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def wait_pods_phase(core: client.CoreV1Api, namespace: str, selector: str, phase: str, count: int,
                    timeout: float = 60) -> list[client.V1Pod]:
    """Waits until exactly `count` pods match `selector`, all in `phase`."""
    def done():
        found = pods(core, namespace, selector)
        return found if len(found) == count and all(p.status.phase == phase for p in found) else None
    return wait_for(done, timeout, f"{count} pods {selector!r} in {namespace} {phase}")
