"""Leader election (operator/entry/leader.py) on the real API server's Lease: one writer at a time.

Two electors stand for the two operators of a rolling update. Time is the
real monotonic clock with a short lease (3 s), so the take-over waits are real.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config

from cluster.kube import wait_for
from tessera.operator.entry.leader import LeaderElector, LeaseTiming, NotLeader, guard_writes

TIMING = LeaseTiming(lease_duration_s=3.0, renew_deadline_s=2.0, retry_s=0.4)


@pytest.fixture
def elector_pair(cluster, namespace):
    def make(identity: str) -> LeaderElector:
        return LeaderElector(config.new_client_from_config(config_file=str(cluster.kubeconfig)), namespace,
                             name="tessera-test", identity=identity, timing=TIMING)
    return make("first"), make("second")


def test_only_one_of_two_candidates_leads(elector_pair, api_client, namespace):
    first, second = elector_pair
    assert first.try_acquire_or_renew() and first.may_write()
    assert not second.try_acquire_or_renew() and not second.may_write()
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease("tessera-test", namespace)
    assert lease.spec.holder_identity == "first" and lease.spec.lease_duration_seconds == 3


def test_a_standby_takes_over_only_a_lease_duration_after_the_last_renewal(elector_pair):
    first, second = elector_pair
    assert first.try_acquire_or_renew()
    renewed = time.monotonic()
    assert not second.try_acquire_or_renew()  # the standby first sees the record here
    # The leader stops renewing (a hung process): its own writes end at the renew deadline...
    wait_for(lambda: not first.may_write(), 5, "the leader's write deadline")
    stopped_writing = time.monotonic()
    assert stopped_writing - renewed <= TIMING.renew_deadline_s + 0.2
    # ...and the standby takes over only once the record was unchanged for a whole lease duration.
    wait_for(second.try_acquire_or_renew, 10, "the standby's take-over", interval=0.1)
    took_over = time.monotonic()
    assert took_over - renewed >= TIMING.lease_duration_s
    assert took_over - stopped_writing >= TIMING.lease_duration_s - TIMING.renew_deadline_s - 0.05
    # The old leader finds the Lease gone to another and stays off.
    assert not first.try_acquire_or_renew() and not first.may_write()


def test_a_released_lease_is_taken_at_once(elector_pair):
    first, second = elector_pair
    assert first.try_acquire_or_renew()
    assert not second.try_acquire_or_renew()
    first.release()
    assert not first.may_write()
    assert second.try_acquire_or_renew()


def test_renewals_keep_the_lease_past_its_duration(elector_pair):
    first, second = elector_pair
    deadline = time.monotonic() + 2 * TIMING.lease_duration_s
    while time.monotonic() < deadline:
        assert first.try_acquire_or_renew()
        assert not second.try_acquire_or_renew()
        time.sleep(TIMING.retry_s)


def test_a_guarded_client_refuses_writes_without_the_lease_and_allows_reads(elector_pair, cluster, namespace):
    first, second = elector_pair
    assert first.try_acquire_or_renew()
    guarded = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    guard_writes(guarded, second)
    core = client.CoreV1Api(guarded)
    with pytest.raises(NotLeader, match="does not hold the Lease"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "refused"}})
    assert core.list_namespaced_config_map(namespace) is not None  # reads pass
    first.release()
    assert second.try_acquire_or_renew()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "allowed"}})
