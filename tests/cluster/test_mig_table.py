"""The MIG-manager stand-in's own hardware table refuses what real GPUs refuse."""

import pytest

from cluster.mig_table import LayoutRefused, place

H100 = "NVIDIA-H100-80GB-HBM3"


def test_seven_1g_instances_fill_an_h100():
    assert sorted(start for _, start in place(H100, {"1g.10gb": 7})) == list(range(7))


def test_an_eighth_1g_instance_is_refused():
    with pytest.raises(LayoutRefused, match="maximum"):
        place(H100, {"1g.10gb": 8})


def test_a_profile_of_another_gpu_is_refused():
    with pytest.raises(LayoutRefused, match="unknown MIG profile"):
        place(H100, {"1g.5gb": 1})


def test_3g_plus_4g_fits_but_not_with_another_1g():
    assert len(place(H100, {"3g.40gb": 1, "4g.40gb": 1})) == 2
    with pytest.raises(LayoutRefused, match="compute"):
        place(H100, {"3g.40gb": 1, "4g.40gb": 1, "1g.10gb": 1})


def test_three_double_memory_1g_beside_a_3g_has_no_placement():
    # 6 compute slices would fit; the memory slices cannot be arranged.
    with pytest.raises(LayoutRefused, match="no valid placement"):
        place(H100, {"3g.40gb": 1, "1g.20gb": 3})


def test_three_2g_and_one_double_memory_1g_fill_the_gpu():
    placed = place(H100, {"2g.20gb": 3, "1g.20gb": 1})
    assert sorted(placed) == [("1g.20gb", 6), ("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)]


def test_h200_and_a100_use_their_own_profile_names():
    assert place("NVIDIA-H200", {"7g.141gb": 1}) == [("7g.141gb", 0)]
    assert len(place("NVIDIA-A100-SXM4-40GB", {"3g.20gb": 2})) == 2
    with pytest.raises(LayoutRefused):
        place("NVIDIA-A100-SXM4-40GB", {"3g.40gb": 1})
