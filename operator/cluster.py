"""The only module that talks to the Kubernetes API.

Reads come back as plain dicts (the API's own JSON shapes); writes are
server-side apply under one field manager for tessera's children, merge
patches where tessera must remove what another manager owns (a node's MIG
state label), and deletes preconditioned on the uid tessera saw. All calls
are blocking: the reconciler runs them in a worker thread, never on the
event loop.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import partial
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from tessera.operator import naming, preflight
from tessera.operator.json_pieces import loads_in_pieces
from tessera.operator.gpus import mig_configmap
from tessera.operator.settings import OperatorSettings
from tessera.operator.api.systems import PLURAL

GROUP, VERSION = "tessera.ai", "v1alpha1"
CLUSTER_POLICY = ("nvidia.com", "v1", "clusterpolicies")
DEFAULT_MIG_CONFIGMAP = "default-mig-parted-config"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
UNPROCESSABLE = 422
"""The API server's answer to a JSON patch whose `test` operation fails."""
POOL_STATE_PREFIX = "tessera-pool-"
CUSTOM_KINDS = {"InferencePool": ("inference.networking.k8s.io", "v1", "inferencepools")}
"""Other projects' kinds tessera writes: kind -> (group, version, plural)."""
CLIENT_CALLS: dict[type, tuple[str, ...]] = {
    client.CoreV1Api: (
        "list_node", "patch_node", "read_namespace", "list_namespace", "create_namespace",
        "list_resource_quota_for_all_namespaces", "list_namespaced_resource_quota", "list_pod_for_all_namespaces",
        "list_namespaced_pod", "list_service_for_all_namespaces", "list_namespaced_service",
        "list_config_map_for_all_namespaces", "patch_namespaced_service", "delete_namespaced_service", "list_namespaced_config_map",
        "read_namespaced_config_map", "create_namespaced_config_map", "patch_namespaced_config_map",
        "delete_namespaced_config_map", "create_namespaced_event", "patch_namespaced_pod_status"),
    client.AppsV1Api: ("list_deployment_for_all_namespaces", "list_namespaced_deployment",
                       "patch_namespaced_deployment", "delete_namespaced_deployment"),
    client.DiscoveryV1Api: ("list_namespaced_endpoint_slice", "patch_namespaced_endpoint_slice",
                            "delete_namespaced_endpoint_slice"),
    client.BatchV1Api: ("list_job_for_all_namespaces", "list_namespaced_job", "patch_namespaced_job"),
    client.CustomObjectsApi: ("list_cluster_custom_object", "list_namespaced_custom_object",
                              "get_cluster_custom_object", "patch_namespaced_custom_object_status",
                              "patch_namespaced_custom_object", "delete_namespaced_custom_object"),
    client.ApiextensionsV1Api: ("read_custom_resource_definition",),
    client.ApisApi: ("get_api_versions",),
    client.CoordinationV1Api: ("read_namespaced_lease", "create_namespaced_lease", "replace_namespaced_lease"),
}
"""Every kubernetes-client method tessera calls (tests/tessera_operator/test_client_validators.py keeps it whole)."""


def build_client_validators() -> None:
    """Builds the argument validators of the client methods tessera calls, before the event loop serves.

    The kubernetes client validates each API method's arguments with pydantic's validate_call and
    builds that validator on the method's first call: in the reconcile thread, with the GIL held,
    which the event loop saw as a stall of up to ~200 ms. A call with an argument no method takes
    builds the validator and is refused before any request is sent (about 2 ms per method).
    """
    api_client = client.ApiClient()
    for api_class, methods in CLIENT_CALLS.items():
        api = api_class(api_client)
        for method in methods:
            try:
                getattr(api, method)(tessera_builds_the_validator=True)
            except (ValidationError, TypeError):
                continue


class Cluster:
    def __init__(self, api_client: client.ApiClient, settings: OperatorSettings) -> None:
        self.api_client = api_client
        self.settings = settings
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.discovery = client.DiscoveryV1Api(api_client)
        self.apis = client.ApisApi(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)
        self.writes = 0
        self.mig_mismatch = mig_configmap.MismatchReporter()

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        """An answer as the API server sent it. Reads skip the client's models (`_preload_content=False`):
        building them, managedFields and all, took ~10x the CPU, and the GIL from the event loop. A list's
        items are decoded one at a time (json_pieces.py): one `json.loads` of 100 nodes held the GIL 4-26 ms."""
        decoded: dict[str, Any] = loads_in_pieces(response.data)
        return decoded

    # -- reads -----------------------------------------------------------------
    def list_systems(self, plural: str = PLURAL) -> list[dict]:
        """The CompoundInferenceSystems (or the objects of another of tessera's kinds) in the watched namespaces."""
        if not self.settings.namespaces:
            return self._json(self.custom.list_cluster_custom_object(GROUP, VERSION, plural,
                                                                     _preload_content=False))["items"]
        found = []
        for namespace in self.settings.namespaces:
            found += self._json(self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural,
                                                                          _preload_content=False))["items"]
        return found

    def list_nodes(self) -> list[dict]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.settings.node_selector.items()))
        return self._json(self.core.list_node(label_selector=selector or None, _preload_content=False))["items"]

    def _watched(self) -> list[str | None]:
        """The namespaces tessera watches; None is all of them."""
        namespaces: list[str | None] = [*self.settings.namespaces]
        return namespaces or [None]

    def list_children(self) -> list[dict]:
        """tessera's Deployments, their PodDisruptionBudgets, Services and ConfigMaps (frontend configs) in the
        watched namespaces.

        Pool plans and measured profiles are ConfigMaps with the same label but no system owns them:
        `decide.live_children` leaves them out."""
        selector = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
        found = []
        for namespace in self._watched():
            raw: dict[str, Any] = {"label_selector": selector, "_preload_content": False}
            if namespace is None:
                deployments = self.apps.list_deployment_for_all_namespaces(**raw)
                services = self.core.list_service_for_all_namespaces(**raw)
                configmaps = self.core.list_config_map_for_all_namespaces(**raw)
                budgets = self.policy.list_pod_disruption_budget_for_all_namespaces(**raw)
            else:
                deployments = self.apps.list_namespaced_deployment(namespace, **raw)
                services = self.core.list_namespaced_service(namespace, **raw)
                configmaps = self.core.list_namespaced_config_map(namespace, **raw)
                budgets = self.policy.list_namespaced_pod_disruption_budget(namespace, **raw)
            found += [{**d, "kind": "Deployment", "apiVersion": "apps/v1"} for d in self._json(deployments)["items"]]
            found += [{**s, "kind": "Service", "apiVersion": "v1"} for s in self._json(services)["items"]]
            found += [{**c, "kind": "ConfigMap", "apiVersion": "v1"} for c in self._json(configmaps)["items"]]
            found += [{**b, "kind": "PodDisruptionBudget", "apiVersion": "policy/v1"}
                      for b in self._json(budgets)["items"]]
        return found

    def list_others_services(self, namespace: str) -> list[dict]:
        """The Services of a namespace that are not tessera's (an adapter's route takes no name another Service has;
        tessera's own come with `list_children`, so no Service is listed twice)."""
        selector = f"{naming.MANAGED_BY}!={naming.MANAGED_BY_VALUE}"
        listed = self._json(self.core.list_namespaced_service(namespace, label_selector=selector,
                                                              _preload_content=False))["items"]
        return [{**s, "kind": "Service", "apiVersion": "v1"} for s in listed]

    def list_endpoint_slices(self, namespace: str, selector: str) -> list[dict]:
        listed = self._json(self.discovery.list_namespaced_endpoint_slice(namespace, label_selector=selector,
                                                                          _preload_content=False))["items"]
        return [{**s, "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1"} for s in listed]

    def serves(self, group_version: str) -> bool:
        """Whether the API server serves this group/version (API discovery: any authenticated user may ask)."""
        groups = self._json(self.apis.get_api_versions(_preload_content=False)).get("groups") or []
        return any(v.get("groupVersion") == group_version for g in groups for v in g.get("versions") or [])

    def list_custom_objects(self, group: str, version: str, plural: str, namespace: str, selector: str) -> list[dict]:
        return self._json(self.custom.list_namespaced_custom_object(group, version, namespace, plural,
                                                                    label_selector=selector,
                                                                    _preload_content=False))["items"]

    def list_resource_quotas(self) -> list[dict]:
        """The ResourceQuotas of the watched namespaces (those on MIG instances cap what a solve may give)."""
        found = []
        for namespace in self._watched():
            raw: dict[str, Any] = {"_preload_content": False}
            listed = (self.core.list_resource_quota_for_all_namespaces(**raw) if namespace is None
                      else self.core.list_namespaced_resource_quota(namespace, **raw))
            found += self._json(listed)["items"]
        return found

    def mig_configs_in_use(self) -> set[str]:
        """The MIG configs any node of the cluster names (also nodes outside tessera's selector)."""
        nodes = self._json(self.core.list_node(label_selector="nvidia.com/mig.config", _preload_content=False))
        return {n["metadata"]["labels"]["nvidia.com/mig.config"] for n in nodes["items"]}

    def gpu_pods_on(self, node: str) -> dict[str, str | None]:
        """Pods on a node that hold GPUs or MIG instances (mig-manager does not drain them): `namespace/name` -> the
        tessera Deployment it names (label tessera.ai/deployment on a pod managed by tessera), None for other pods."""
        pods = self._json(self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                                _preload_content=False))["items"]
        holding: dict[str, str | None] = {}
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"]["containers"]:
                resources = container.get("resources") or {}
                asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                if any(r == "nvidia.com/gpu" or r.startswith("nvidia.com/mig-") for r in asked):
                    labels = pod["metadata"].get("labels") or {}
                    tessera = labels.get(naming.MANAGED_BY) == naming.MANAGED_BY_VALUE
                    holding[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = (
                        labels.get(naming.DEPLOYMENT_LABEL) if tessera else None)
                    break
        return holding

    def read_cluster_policy(self) -> dict | None:
        """The GPU Operator's ClusterPolicy; None when there is none."""
        group, version, plural = CLUSTER_POLICY
        try:
            policy: Any = self.custom.get_cluster_custom_object(group, version, plural, self.settings.cluster_policy)
            return policy
        except ApiException as error:
            if error.status != 404:
                raise
            return None

    def mig_configmap_name(self, policy: dict | None) -> str:
        """The ConfigMap tessera writes MIG configs into; a ClusterPolicy naming another is reported."""
        config = (((policy or {}).get("spec") or {}).get("migManager") or {}).get("config") or {}
        named = None if policy is None else (config.get("name") or DEFAULT_MIG_CONFIGMAP)
        resolved = mig_configmap.resolve(named, self.settings.mig_configmap, self.settings.mig_configmap_fallback)
        if self.mig_mismatch.changed(resolved) and policy is not None and resolved.mismatch:
            now = datetime.now(timezone.utc)
            self.post_event(mig_configmap.event_body(policy, resolved.mismatch, self.settings.state_namespace,
                                                     now.strftime("%Y-%m-%dT%H:%M:%SZ"), f"{now:%Y%m%d%H%M%S%f}"))
        return resolved.name

    def read_prerequisites(self, policy: dict | None, crd_names: list[str]) -> preflight.Seen:
        """What the preflight checks, read only: the namespaces tessera needs, its CRDs; what it may not read."""
        namespaces: dict[str, bool] = {}
        crds: dict[str, dict | None] = {}
        forbidden: list[str] = []
        for name in dict.fromkeys([self.settings.gpu_operator_namespace, *self.settings.namespaces]):
            found = _read_unless_forbidden(partial(self.core.read_namespace, name, _preload_content=False),
                                           f"namespace {name!r}", forbidden)
            if found is not None:
                namespaces[name] = found is not _MISSING
        for name in crd_names:
            found = _read_unless_forbidden(partial(self.extensions.read_custom_resource_definition,
                                                   name, _preload_content=False), f"CRD {name}", forbidden)
            if found is not None:
                crds[name] = None if found is _MISSING else self._json(found)
        return preflight.Seen(namespaces=namespaces, cluster_policy=policy, crds=crds, forbidden=tuple(forbidden))

    def namespaces_matching(self, selector: str) -> frozenset[str] | str:
        """The names of the namespaces the label selector matches, or the API server's reason for refusing it."""
        try:
            listed = self._json(self.core.list_namespace(label_selector=selector, _preload_content=False))
        except ApiException as error:
            if error.status == 400:
                return _api_message(error)
            raise
        return frozenset(item["metadata"]["name"] for item in listed.get("items", []))

    def read_configmap(self, namespace: str, name: str) -> dict | None:
        try:
            return self._json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list_labelled_jobs(self, selector: str) -> list[dict]:
        """Jobs with these labels in the watched namespaces."""
        return [{**j, "kind": "Job", "apiVersion": "batch/v1"} for j in self._labelled_in_watched(
            selector, self.batch.list_job_for_all_namespaces, self.batch.list_namespaced_job)]

    def list_job_pods(self, namespace: str, job: str) -> list[dict]:
        """The pods the Job controller made for a Job (it labels them with the Job's name)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}",
                                             _preload_content=False)
        return self._json(pods)["items"]

    def list_labelled_pods(self, selector: str) -> list[dict]:
        """Pods with these labels in the watched namespaces."""
        return self._labelled_in_watched(selector, self.core.list_pod_for_all_namespaces,
                                         self.core.list_namespaced_pod)

    def _labelled_in_watched(self, selector: str, list_all: Callable[..., Any],
                             list_namespaced: Callable[..., Any]) -> list[dict]:
        """Objects with these labels in the watched namespaces: one list call per namespace, or one for all."""
        found = []
        for namespace in self._watched():
            raw: dict[str, Any] = {"label_selector": selector, "_preload_content": False}
            listed = list_all(**raw) if namespace is None else list_namespaced(namespace, **raw)
            found += self._json(listed)["items"]
        return found

    def list_labelled_configmaps(self, namespace: str, selector: str) -> list[dict]:
        return self._json(self.core.list_namespaced_config_map(namespace, label_selector=selector,
                                                               _preload_content=False))["items"]

    # -- writes ----------------------------------------------------------------
    def write_configmap(self, namespace: str, name: str, data: dict[str, str], annotations: Mapping[str, str | None],
                        exists: bool) -> None:
        """Creates the ConfigMap or merge-patches the given keys (others, and other managers', stay)."""
        self.writes += 1
        body: Any = {"metadata": {"name": name, "annotations": annotations}, "data": data}  # as post_event
        if exists:
            self.core.patch_namespaced_config_map(name, namespace, body, _content_type=MERGE)
        else:
            self.core.create_namespaced_config_map(namespace, body)

    def ensure_namespace(self, name: str) -> None:
        try:
            self.core.read_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise
            self.writes += 1
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """A Deployment's replicas to 0, its applied hash marked so the plan's body is applied again later."""
        self.writes += 1
        self._patch_deployment(namespace, name, {"spec": {"replicas": 0},
                                                 "metadata": {"annotations": {naming.APPLIED_HASH: naming.SCALED_TO_ZERO}}})

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """A Deployment no plan wants to fewer replicas (its hash stays: no plan applies it again)."""
        self.writes += 1
        self._patch_deployment(namespace, name, {"spec": {"replicas": replicas}})

    def _patch_deployment(self, namespace: str, name: str, patch: dict) -> None:
        """A merge patch of a Deployment; one already gone needs none."""
        try:
            self.apps.patch_namespaced_deployment(name, namespace, patch, _content_type=MERGE)
        except ApiException as error:
            if error.status != 404:
                raise

    def patch_node(self, name: str, patch: dict) -> None:
        self.writes += 1
        self.core.patch_node(name, patch, _content_type=MERGE)

    def patch_node_guarded(self, name: str, ops: list[dict]) -> bool:
        """A JSON patch whose `test` operations guard it; False, and nothing written, when one fails (the API
        server applies a JSON patch whole or not at all, against the node as it is then, not as tessera read it)."""
        self.writes += 1
        try:
            self.core.patch_node(name, ops, _content_type=JSON_PATCH)
        except ApiException as error:
            if error.status != UNPROCESSABLE:
                raise
            return False
        return True

    def patch_pod_status(self, namespace: str, name: str, patch: dict) -> None:
        """A strategic merge on the status subresource: the pod's conditions merge by type, so the kubelet's stay;
        annotations may change there, the spec may not (so tessera needs no right to patch pods). A pod deleted
        meanwhile has nothing left to write to."""
        self.writes += 1
        try:
            self.core.patch_namespaced_pod_status(name, namespace, patch, _content_type=STRATEGIC)
        except ApiException as error:
            if error.status != 404:
                raise

    def apply(self, body: dict) -> None:
        """Server-side apply under tessera's field manager."""
        self.writes += 1
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        kwargs: dict[str, Any] = {"field_manager": naming.FIELD_MANAGER, "force": True, "_content_type": APPLY}
        if body["kind"] == "Deployment":
            self.apps.patch_namespaced_deployment(name, namespace, body, **kwargs)
        elif body["kind"] == "Service":
            self.core.patch_namespaced_service(name, namespace, body, **kwargs)
        elif body["kind"] == "PodDisruptionBudget":
            self.policy.patch_namespaced_pod_disruption_budget(name, namespace, body, **kwargs)
        elif body["kind"] == "EndpointSlice":
            self.discovery.patch_namespaced_endpoint_slice(name, namespace, body, **kwargs)
        elif body["kind"] == "Job":
            self.batch.patch_namespaced_job(name, namespace, body, **kwargs)
        elif body["kind"] in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[body["kind"]]
            self.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, body, **kwargs)
        elif body["kind"] == "ConfigMap":
            self.core.patch_namespaced_config_map(name, namespace, body, **kwargs)
        else:
            raise ValueError(f"tessera applies no {body['kind']}")

    def delete_child(self, obj: dict) -> None:
        """Deletes a child, only the very object seen (uid precondition)."""
        self.writes += 1
        metadata = obj["metadata"]
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=metadata["uid"]),
                                          propagation_policy="Background")
        try:
            if obj["kind"] == "Deployment":
                self.apps.delete_namespaced_deployment(metadata["name"], metadata["namespace"], body=options)
            elif obj["kind"] == "ConfigMap":
                self.core.delete_namespaced_config_map(metadata["name"], metadata["namespace"], body=options)
            elif obj["kind"] == "PodDisruptionBudget":
                self.policy.delete_namespaced_pod_disruption_budget(metadata["name"], metadata["namespace"],
                                                                    body=options)
            elif obj["kind"] in CUSTOM_KINDS:
                group, version, plural = CUSTOM_KINDS[obj["kind"]]
                self.custom.delete_namespaced_custom_object(group, version, metadata["namespace"], plural,
                                                            metadata["name"], body=options)
            elif obj["kind"] == "EndpointSlice":
                self.discovery.delete_namespaced_endpoint_slice(metadata["name"], metadata["namespace"], body=options)
            else:
                self.core.delete_namespaced_service(metadata["name"], metadata["namespace"], body=options)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def patch_system_status(self, namespace: str, name: str, status: dict, plural: str = PLURAL) -> None:
        """The status of a CompoundInferenceSystem, or of another of tessera's kinds (`plural`)."""
        self.writes += 1
        try:
            self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name,
                                                              {"status": status}, _content_type=MERGE)
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: nothing to report on
                raise

    def post_event(self, body: dict) -> None:
        self.writes += 1
        event: Any = body  # the client sends a dict as it is; its stubs name only the model class
        try:
            self.core.create_namespaced_event(body["metadata"]["namespace"], event)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    # -- the pool's stored plan -------------------------------------------------
    def pool_state_name(self, pool_key: str) -> str:
        return naming.dns_label(f"{POOL_STATE_PREFIX}{pool_key}")

    def read_pool_configmap(self, pool_key: str) -> dict | None:
        """The pool's plan ConfigMap: its data (the stored plan) and its annotations (a pause)."""
        return self.read_configmap(self.settings.state_namespace, self.pool_state_name(pool_key))

    def delete_pool_state(self, pool_key: str) -> None:
        self.writes += 1
        try:
            self.core.delete_namespaced_config_map(self.pool_state_name(pool_key), self.settings.state_namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    def write_pool_state(self, pool_key: str, data: dict[str, str]) -> None:
        self.ensure_namespace(self.settings.state_namespace)
        name = self.pool_state_name(pool_key)
        exists = self.read_configmap(self.settings.state_namespace, name) is not None
        body_annotations = {naming.SCHEMA_LABEL: naming.SCHEMA_VERSION}
        self.write_configmap(self.settings.state_namespace, name, data, body_annotations, exists)


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


_MISSING = object()


def _read_unless_forbidden(read: Callable[[], Any], what: str, forbidden: list[str]) -> Any:
    """The object read; _MISSING when the API says it does not exist; None, with `what` added to `forbidden`,
    when tessera may not read it (the preflight reports that rather than guessing)."""
    try:
        return read()
    except ApiException as error:
        if error.status == 403:
            forbidden.append(what)
            return None
        if error.status == 404:
            return _MISSING
        raise


def _api_message(error: ApiException) -> str:
    """The API server's message of a refused request (its Status body), else the HTTP reason."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.reason)
