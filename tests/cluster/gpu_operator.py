"""The slice of the NVIDIA GPU Operator's API the tests need: its ClusterPolicy
(nvidia.com/v1), which names the mig-parted ConfigMap mig-manager reads
(`spec.migManager.config.name`, key `config.yaml`). The CRD here is a minimal
stand-in with a permissive schema, not the operator's full one."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from cluster.kube import wait_crd_established

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"
DEFAULT_MIG_CONFIGMAP = "default-mig-parted-config"  # the GPU Operator's own

CLUSTER_POLICY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {"plural": PLURAL, "singular": "clusterpolicy", "kind": "ClusterPolicy", "listKind": "ClusterPolicyList"},
        "versions": [{
            "name": VERSION, "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


def install_cluster_policy(api_client: client.ApiClient, mig_configmap: str, name: str = "cluster-policy") -> None:
    """Creates the ClusterPolicy CRD (if missing) and a ClusterPolicy naming `mig_configmap`."""
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(CLUSTER_POLICY_CRD)
    except ApiException as e:
        if e.status != 409:
            raise
    wait_crd_established(api_client, CLUSTER_POLICY_CRD["metadata"]["name"])
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"mig": {"strategy": "mixed"},
                     "migManager": {"enabled": True, "config": {"name": mig_configmap, "default": "all-disabled"}}}}
    try:
        client.CustomObjectsApi(api_client).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    except ApiException as e:
        if e.status != 409:
            raise
        set_mig_configmap(api_client, mig_configmap, name)


def set_mig_configmap(api_client: client.ApiClient, mig_configmap: str, name: str = "cluster-policy") -> None:
    client.CustomObjectsApi(api_client).patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"spec": {"migManager": {"config": {"name": mig_configmap}}}})


def mig_configmap_name(api_client: client.ApiClient, name: str = "cluster-policy") -> str | None:
    """The ConfigMap the ClusterPolicy names; None when there is no ClusterPolicy."""
    try:
        policy = client.CustomObjectsApi(api_client).get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    config = ((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}
    return config.get("name") or DEFAULT_MIG_CONFIGMAP
