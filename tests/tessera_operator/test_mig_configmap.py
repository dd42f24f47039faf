"""Which mig-parted ConfigMap tessera writes, and when a ClusterPolicy naming another one is reported."""

from __future__ import annotations

from tessera.operator.gpus.mig_configmap import MismatchReporter, resolve
from tessera.operator.metrics import MIG_CONFIGMAP_MISMATCH as MISMATCH


def test_unset_tessera_follows_the_cluster_policy():
    assert resolve("theirs", None, "fallback").name == "theirs"
    assert resolve(None, None, "fallback").name == "fallback"


def test_a_cluster_policy_naming_tesseras_configmap_is_no_mismatch():
    assert resolve("tessera-mig", "tessera-mig", "fallback").mismatch is None


def test_a_cluster_policy_naming_another_configmap_is_reported_and_tessera_keeps_to_its_own():
    resolved = resolve("default-mig-parted-config", "tessera-mig", "fallback")
    assert resolved.name == "tessera-mig"
    assert "default-mig-parted-config" in resolved.mismatch and "spec.migManager.config.name" in resolved.mismatch


def test_no_cluster_policy_is_no_mismatch():
    assert resolve(None, "tessera-mig", "fallback") == resolve("tessera-mig", "tessera-mig", "x")


def test_a_mismatch_is_reported_once_and_cleared_when_fixed():
    reporter = MismatchReporter()
    wrong = resolve("other", "mine", "fallback")
    assert reporter.changed(wrong) is True
    assert MISMATCH._value.get() == 1
    assert reporter.changed(wrong) is False  # the next resync: no second Event
    assert reporter.changed(resolve("mine", "mine", "fallback")) is False
    assert MISMATCH._value.get() == 0
    assert reporter.changed(wrong) is True  # broken again: reported again
