"""How weights reach an AdapterPool server pod: the pod template's fetchers, volumes and vLLM's local model."""

from __future__ import annotations

import pytest

from tessera.operator.reconcile.adapter_pool_decide import running_servers, server_deployment
from tessera.operator.reconcile.adapter_weights import (ADAPTER_DIR, BASE_CONTAINER, FETCHER_CONTAINER,
                                                        FETCHER_PORT)
from tessera.operator.settings import OperatorSettings

from .test_adapter_pool_decide import adapter_pool, gpu_pool, live, pool_object, servers_of

IMAGE = "registry.example/tessera/tessera:1.2"
SETTINGS = OperatorSettings(frontend_image=IMAGE)
DIGEST = "sha256:" + "a" * 64


def pod_of(**spec_changes) -> dict:
    obj = adapter_pool(**spec_changes)
    servers = servers_of(obj, gpu_pool())[0]
    body = server_deployment(obj.ref, obj.spec, servers.placement.servers[0], servers.slots[0], "gpu-a", SETTINGS)
    return body["spec"]["template"]["spec"]


def base_model(uri: str) -> dict:
    base = pool_object()["spec"]["baseModel"]
    return {**base, "weights": {"uri": uri, "digest": DIGEST}}


def containers(pod: dict) -> dict[str, dict]:
    return {c["name"]: c for c in pod["initContainers"] + pod["containers"]}


def test_the_base_model_is_fetched_and_checked_by_an_init_container_of_tesseras_image_before_vllm():
    pod = pod_of(baseModel=base_model("s3://models/qwen/"))
    base = pod["initContainers"][0]
    assert base["name"] == BASE_CONTAINER and base["image"] == IMAGE and "restartPolicy" not in base
    assert base["args"] == ["weights", "fetch", "s3://models/qwen/", DIGEST, "/models/base/model"]
    assert {"name": "base-model", "emptyDir": {}} in pod["volumes"]


def test_vllm_runs_the_local_copy_served_under_the_base_models_name():
    pod = pod_of(baseModel=base_model("s3://models/qwen/"))
    args = containers(pod)["server"]["args"]
    assert args[args.index("--model") + 1] == "/models/base/model"
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen2.5-7B-Instruct"
    assert {"name": "base-model", "mountPath": "/models/base", "readOnly": True} in containers(pod)["server"][
        "volumeMounts"]


def test_a_base_model_on_a_claim_is_mounted_read_only_and_checked_in_place_never_copied():
    pod = pod_of(baseModel=base_model("pvc://model-store/qwen/7b"))
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert [v["persistentVolumeClaim"] for v in claims] == [{"claimName": "model-store", "readOnly": True}]
    assert not any(v["name"] == "base-model" for v in pod["volumes"])
    assert pod["initContainers"][0]["args"] == ["weights", "verify", "/sources/pvc/model-store/qwen/7b", DIGEST]
    args = containers(pod)["server"]["args"]
    assert args[args.index("--model") + 1] == "/sources/pvc/model-store/qwen/7b"
    mount = next(m for m in containers(pod)["server"]["volumeMounts"] if m["name"] == claims[0]["name"])
    assert mount == {"name": claims[0]["name"], "mountPath": "/sources/pvc/model-store", "readOnly": True}


def test_adapters_are_fetched_by_a_native_sidecar_into_the_folder_vllm_reads_read_only():
    pod = pod_of()
    sidecar = containers(pod)[FETCHER_CONTAINER]
    assert sidecar["restartPolicy"] == "Always" and sidecar["image"] == IMAGE
    assert sidecar["args"][:4] == ["weights", "serve", "--dir", ADAPTER_DIR]
    assert sidecar["ports"] == [{"name": "fetch", "containerPort": FETCHER_PORT}]
    assert {"name": "adapters", "mountPath": ADAPTER_DIR} in sidecar["volumeMounts"]
    assert {"name": "adapters", "mountPath": ADAPTER_DIR, "readOnly": True} in containers(pod)["server"]["volumeMounts"]


def test_every_claim_an_adapter_names_is_mounted_read_only_into_the_sidecar_only():
    adapters = pool_object()["spec"]["adapters"]
    adapters[0] = {**adapters[0], "weights": {"uri": "pvc://lora-store/en", "digest": DIGEST}}
    pod = pod_of(adapters=adapters)
    sidecar_mounts = {m["mountPath"] for m in containers(pod)[FETCHER_CONTAINER]["volumeMounts"]}
    assert "/sources/pvc/lora-store" in sidecar_mounts
    assert all(not m["mountPath"].startswith("/sources") for m in containers(pod)["server"]["volumeMounts"])


def test_the_credentials_secret_is_the_fetchers_environment_never_vllms():
    pod = pod_of(credentialsSecretRef={"name": "store-keys"})
    env_from = [{"secretRef": {"name": "store-keys"}}]
    assert containers(pod)[BASE_CONTAINER]["envFrom"] == env_from
    assert containers(pod)[FETCHER_CONTAINER]["envFrom"] == env_from
    server = containers(pod)["server"]
    assert "envFrom" not in server and all("store-keys" not in str(e) for e in server["env"])


def test_the_fetchers_keep_the_restricted_profile_with_a_read_only_root_filesystem():
    pod = pod_of()
    for name in (BASE_CONTAINER, FETCHER_CONTAINER):
        security = containers(pod)[name]["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("field,uri", [("baseModel", "hf://Qwen/Qwen2.5-7B-Instruct"), ("adapter", "gs://b/en"),
                                       ("adapter", "oci://registry/en:1")])
def test_a_pool_whose_weights_use_a_scheme_not_fetched_yet_is_invalid_naming_the_field(field, uri):
    if field == "baseModel":
        obj, where = adapter_pool(baseModel=base_model(uri)), "spec.baseModel.weights.uri"
    else:
        adapters = pool_object()["spec"]["adapters"]
        adapters[1] = {**adapters[1], "weights": {"uri": uri, "digest": DIGEST}}
        obj, where = adapter_pool(adapters=adapters), "spec.adapters[1].weights.uri"
    scheme = uri.split(":")[0]
    assert not obj.valid
    assert obj.error == (f"{where}: {scheme}:// weights are not supported yet (supported: https://, s3://, pvc://)")


def deployment_under(settings: OperatorSettings, running=None) -> dict:
    obj = adapter_pool()
    servers = servers_of(obj, gpu_pool())[0]
    return server_deployment(obj.ref, obj.spec, servers.placement.servers[0], servers.slots[0], "gpu-a", settings,
                             running)


def test_a_running_server_that_keeps_its_flags_keeps_its_fetchers_image_through_a_tessera_upgrade():
    obj = adapter_pool()
    written = deployment_under(SETTINGS)
    running = running_servers([live(written)], obj.ref)[0]
    upgraded = deployment_under(OperatorSettings(frontend_image="registry.example/tessera/tessera:1.3"), running)
    assert upgraded["spec"]["template"] == written["spec"]["template"]  # no restart of vLLM


def test_a_new_server_gets_the_operators_image_for_its_fetchers():
    pod = deployment_under(OperatorSettings(frontend_image="registry.example/tessera/tessera:1.3"))["spec"]["template"]
    assert {c["image"] for c in pod["spec"]["initContainers"]} == {"registry.example/tessera/tessera:1.3"}
