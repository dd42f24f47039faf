"""The leader election's timing rules (operator/entry/leader.py); the election itself is tested on the real API
server in tests/e2e/test_leader_election.py."""

from __future__ import annotations

import pytest

from tessera.operator.entry.leader import LeaseTiming


def test_client_gos_proportions_scale_with_the_lease():
    assert LeaseTiming.for_duration(15) == LeaseTiming(15, 10, 2)
    timing = LeaseTiming.for_duration(6)
    assert timing.retry_s < timing.renew_deadline_s < timing.lease_duration_s


@pytest.mark.parametrize("durations", [(10, 10, 2), (10, 12, 2), (10, 5, 5), (10, 5, 0)])
def test_a_renew_deadline_not_inside_the_lease_is_refused(durations):
    with pytest.raises(ValueError, match="retry < renew deadline < lease duration"):
        LeaseTiming(*durations)
