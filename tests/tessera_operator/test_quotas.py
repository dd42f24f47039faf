"""A namespace's ResourceQuotas on MIG instances as the planner's quotas (operator/reconcile/quotas.py)."""

from pathlib import Path

import yaml

from tessera.operator.api.systems import read_system
from tessera.operator.reconcile.quotas import instance_quotas

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
