"""How base weights and adapter files reach an AdapterPool server pod: the pod template's part (pure).

The rules (docs/weights.md):

- The base model's weights: an init container of tessera's own image
  (`tessera weights fetch`) fetches `baseModel.weights.uri` into an emptyDir
  and checks its digest before vLLM starts; vLLM gets that folder as `--model`
  and `--served-model-name <baseModel.name>`, so clients still ask for the
  name. A pvc:// source is mounted read-only instead, checked in place
  (`tessera weights verify`), never copied.
- Adapters: a native sidecar (an init container with `restartPolicy: Always`,
  `tessera weights serve`) fetches an adapter into the shared `/adapters`
  emptyDir when the operator asks it, before each vLLM load; vLLM mounts the
  folder read-only. Every claim a pvc:// adapter names is mounted read-only
  into the sidecar.
- A running server that keeps its vLLM flags keeps its fetchers' image: a
  new tessera image (an upgrade) would otherwise change every server's pod
  template and restart vLLM, fetching its base model again. A server that
  restarts anyway (new flags), or a new one, gets the operator's image.
- The pool's credentialsSecretRef is the fetchers' environment only, never
  vLLM's. The fetchers run with a read-only root filesystem: they write only
  into the emptyDirs.
"""

from __future__ import annotations

from tessera.operator import naming
from tessera.operator.pod_security import RESTRICTED_CONTAINER_SECURITY
from tessera.operator.reconcile.actions import Json
from tessera.planner.adapter_pool import AdapterPoolSpec, WeightsSource
from tessera.weights.fetch import pvc_parts, scheme_of

ADAPTER_DIR = "/adapters"
"""Where vLLM finds adapter `name`'s files, `/adapters/<name>`, fetched there by the sidecar."""
BASE_DIR = "/models/base"
BASE_COPY = f"{BASE_DIR}/model"
"""The fetched base model (a folder in BASE_DIR: the fetch stages its copy beside it)."""
SOURCES_DIR = "/sources"
FETCHER_CONTAINER = "fetch-adapters"
BASE_CONTAINER = "fetch-base-model"
FETCHER_PORT = 8001
ADAPTERS_VOLUME = "adapters"
BASE_VOLUME = "base-model"
FETCHER_SECURITY = {**RESTRICTED_CONTAINER_SECURITY, "readOnlyRootFilesystem": True}
FETCHER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}


def claim_volume(claim: str) -> str:
    return "source-" + naming.digest([claim])[:12]


def claim_mount(claim: str) -> str:
    return f"{SOURCES_DIR}/pvc/{claim}"


def base_on_claim(spec: AdapterPoolSpec) -> bool:
    return scheme_of(spec.base_model.weights.uri) == "pvc"


def base_model_path(spec: AdapterPoolSpec) -> str:
    """The folder vLLM's `--model` names: the fetched copy, or the folder on the mounted claim."""
    if not base_on_claim(spec):
        return BASE_COPY
    claim, folder = pvc_parts(spec.base_model.weights.uri)
    return f"{claim_mount(claim)}/{folder}".rstrip("/")


def adapter_claims(spec: AdapterPoolSpec) -> list[str]:
    return sorted({pvc_parts(a.weights.uri)[0] for a in spec.adapters if scheme_of(a.weights.uri) == "pvc"})


def claim_mounts(claims: list[str]) -> list[Json]:
    return [{"name": claim_volume(c), "mountPath": claim_mount(c), "readOnly": True} for c in claims]


def weights_volumes(spec: AdapterPoolSpec) -> list[Json]:
    """The adapters' emptyDir, the base model's (or its claim), and each claim a source names, read-only."""
    claims = sorted(set(adapter_claims(spec)) | ({pvc_parts(spec.base_model.weights.uri)[0]}
                                                 if base_on_claim(spec) else set()))
    base = [] if base_on_claim(spec) else [{"name": BASE_VOLUME, "emptyDir": {}}]
    return [{"name": ADAPTERS_VOLUME, "emptyDir": {}}, *base,
            *({"name": claim_volume(c), "persistentVolumeClaim": {"claimName": c, "readOnly": True}} for c in claims)]


def server_mounts(spec: AdapterPoolSpec) -> list[Json]:
    """vLLM's mounts: the adapters and the base model, read-only."""
    base = (claim_mounts([pvc_parts(spec.base_model.weights.uri)[0]]) if base_on_claim(spec)
            else [{"name": BASE_VOLUME, "mountPath": BASE_DIR, "readOnly": True}])
    return [{"name": ADAPTERS_VOLUME, "mountPath": ADAPTER_DIR, "readOnly": True}, *base]


def credentials(spec: AdapterPoolSpec) -> Json:
    secret = spec.credentials_secret
    return {"envFrom": [{"secretRef": {"name": secret.name}}]} if secret is not None else {}


def fetcher(name: str, image: str, args: list[str], mounts: list[Json], spec: AdapterPoolSpec) -> Json:
    return {"name": name, "image": image, "command": ["tessera"], "args": ["weights", *args],
            "volumeMounts": mounts, "securityContext": FETCHER_SECURITY, "resources": FETCHER_RESOURCES,
            **credentials(spec)}


def base_fetcher(spec: AdapterPoolSpec, image: str) -> Json:
    weights: WeightsSource = spec.base_model.weights
    if base_on_claim(spec):
        return fetcher(BASE_CONTAINER, image, ["verify", base_model_path(spec), weights.digest],
                       claim_mounts([pvc_parts(weights.uri)[0]]), spec)
    return fetcher(BASE_CONTAINER, image, ["fetch", weights.uri, weights.digest, BASE_COPY],
                   [{"name": BASE_VOLUME, "mountPath": BASE_DIR}], spec)


def adapter_fetcher(spec: AdapterPoolSpec, image: str) -> Json:
    container = fetcher(FETCHER_CONTAINER, image,
                        ["serve", "--dir", ADAPTER_DIR, "--sources", SOURCES_DIR, "--port", str(FETCHER_PORT)],
                        [{"name": ADAPTERS_VOLUME, "mountPath": ADAPTER_DIR}, *claim_mounts(adapter_claims(spec))],
                        spec)
    probe = {"httpGet": {"path": "/healthz", "port": FETCHER_PORT}, "periodSeconds": 10}
    return {**container, "restartPolicy": "Always", "ports": [{"name": "fetch", "containerPort": FETCHER_PORT}],
            "readinessProbe": probe}


def running_fetcher_image(pod: Json) -> str | None:
    """The image of a live server's fetcher sidecar, as its Deployment's pod template says."""
    return next((c.get("image") for c in pod.get("initContainers") or [] if c.get("name") == FETCHER_CONTAINER), None)


def fetch_containers(spec: AdapterPoolSpec, image: str) -> list[Json]:
    """The pod's init containers: the base model's fetch, then the adapters' fetcher sidecar."""
    return [base_fetcher(spec, image), adapter_fetcher(spec, image)]
