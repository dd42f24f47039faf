"""A namespace's ResourceQuotas on MIG instances as the planner's quotas, on whole GPUs as a cap on its AdapterPools'
servers (operator/reconcile/quotas.py)."""

from pathlib import Path

import yaml

from tessera.operator.api.systems import read_system
from tessera.operator.reconcile.quotas import WholeGpuQuota, instance_quotas, whole_gpu_quotas

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-model.yaml"


def system(namespace: str, name: str = "single-model"):
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"].update(name=name, namespace=namespace, uid=f"u-{namespace}-{name}", generation=1)
    return read_system(document)


def resource_quota(namespace: str, hard: dict, used: dict | None = None, name: str = "gpus") -> dict:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": hard},
            "status": {"hard": hard, "used": used or {}}}


def tessera_deployment(namespace: str, profile: str, pods: int) -> dict:
    return {"kind": "Deployment", "metadata": {"namespace": namespace, "name": f"server-{profile}"},
            "spec": {"template": {"spec": {"containers": [
                {"resources": {"requests": {f"nvidia.com/mig-{profile}": "1", "cpu": "1"}}}]}}},
            "status": {"replicas": pods}}


def test_a_quota_on_a_mig_profile_caps_the_namespaces_systems_together():
    (quota,) = instance_quotas([resource_quota("team-a", {"requests.nvidia.com/mig-1g.10gb": "4"})],
                               [system("team-a"), system("team-a", "other")], [])
    assert (quota.mig_profile, quota.limit) == ("1g.10gb", 4)
    assert quota.systems == {"team-a/single-model", "team-a/other"}
    assert "ResourceQuota team-a/gpus" in quota.source


def test_pods_tessera_does_not_own_take_their_share_and_tesseras_own_are_given_back():
    used = {"requests.nvidia.com/mig-1g.10gb": "5"}  # 3 of them tessera's servers, 2 someone else's
    (quota,) = instance_quotas([resource_quota("team-a", {"requests.nvidia.com/mig-1g.10gb": "6"}, used)],
                               [system("team-a")], [tessera_deployment("team-a", "1g.10gb", 3)])
    assert quota.limit == 4


def test_the_tightest_of_several_quotas_of_a_namespace_holds():
    quotas = [resource_quota("team-a", {"requests.nvidia.com/mig-1g.10gb": "6"}, name="wide"),
              resource_quota("team-a", {"requests.nvidia.com/mig-1g.10gb": "2"}, name="tight")]
    (quota,) = instance_quotas(quotas, [system("team-a")], [])
    assert quota.limit == 2 and "tight" in quota.source


def test_quotas_on_other_resources_and_of_namespaces_without_systems_of_the_pool_are_ignored():
    quotas = [resource_quota("team-a", {"requests.cpu": "10", "pods": "20"}),
              resource_quota("team-b", {"requests.nvidia.com/mig-1g.10gb": "0"})]
    assert instance_quotas(quotas, [system("team-a")], []) == []


def test_a_quota_already_used_up_by_others_leaves_nothing_never_less():
    used = {"requests.nvidia.com/mig-3g.40gb": "9"}
    (quota,) = instance_quotas([resource_quota("team-a", {"requests.nvidia.com/mig-3g.40gb": "4"}, used)],
                               [system("team-a")], [])
    assert quota.limit == 0


def adapter_server(namespace: str, pods: int) -> dict:
    """An AdapterPool server's Deployment, as adapter_pool_decide builds it: one whole GPU a pod."""
    return {"kind": "Deployment", "metadata": {"namespace": namespace, "name": "support-server-0"},
            "spec": {"template": {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {"replicas": pods}}


def test_a_quota_on_whole_gpus_leaves_the_namespaces_adapter_servers_its_limit_less_what_others_hold():
    used = {"requests.nvidia.com/gpu": "3"}  # 1 of them tessera's server, 2 another workload's pods
    quotas = whole_gpu_quotas([resource_quota("shop", {"requests.nvidia.com/gpu": "4"}, used)], {"shop"},
                              [adapter_server("shop", 1)])
    assert quotas == {"shop": WholeGpuQuota(2, "ResourceQuota shop/gpus: requests.nvidia.com/gpu 4")}


def test_a_plain_nvidia_com_gpu_limit_is_no_quota_the_api_server_enforces_and_caps_nothing():
    quota = resource_quota("shop", {"nvidia.com/gpu": "0", "limits.nvidia.com/gpu": "0"})
    assert whole_gpu_quotas([quota], {"shop"}, []) == {}
    assert instance_quotas([quota], [system("shop")], []) == []


def test_a_quota_on_whole_gpus_is_no_quota_on_mig_instances_and_the_other_way_round():
    quotas = [resource_quota("shop", {"requests.nvidia.com/gpu": "1", "requests.nvidia.com/mig-7g.80gb": "2"})]
    assert [(q.mig_profile, q.limit) for q in instance_quotas(quotas, [system("shop")], [])] == [("7g.80gb", 2)]
    assert {n: q.limit for n, q in whole_gpu_quotas(quotas, {"shop"}, []).items()} == {"shop": 1}


def test_tessera_gives_back_only_the_resource_its_pods_request():
    """A compound server's 7g.80gb instance is no whole GPU: it does not raise the room on requests.nvidia.com/gpu."""
    used = {"requests.nvidia.com/gpu": "2"}
    quotas = whole_gpu_quotas([resource_quota("shop", {"requests.nvidia.com/gpu": "2"}, used)], {"shop"},
                              [tessera_deployment("shop", "7g.80gb", 2)])
    assert quotas["shop"].limit == 0


def test_a_server_pod_admitted_before_its_deployments_status_counts_it_is_given_back():
    """The admission counts the pod in `used` at once; the Deployment's status follows: no moment of less room."""
    asked = {**adapter_server("shop", 0), "spec": {**adapter_server("shop", 0)["spec"], "replicas": 1}}
    used = {"requests.nvidia.com/gpu": "1"}
    quotas = whole_gpu_quotas([resource_quota("shop", {"requests.nvidia.com/gpu": "1"}, used)], {"shop"}, [asked])
    assert quotas["shop"].limit == 1
