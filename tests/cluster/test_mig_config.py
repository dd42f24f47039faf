"""The stand-in reads mig-parted configs as mig-parted does, and refuses what it refuses."""

import pytest
import yaml

from cluster.mig_manager_standin import apply_mig_config
from cluster.mig_table import LayoutRefused

H100 = "NVIDIA-H100-80GB-HBM3"


def config(**configs) -> str:
    return yaml.safe_dump({"version": "v1", "mig-configs": configs})


def test_entries_apply_per_device_and_unnamed_gpus_keep_their_state():
    text = config(mixed=[
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [1], "mig-enabled": False},
    ])
    before = [None, {"3g.40gb": 2}, {"7g.80gb": 1}]
    assert apply_mig_config(H100, before, text, "mixed") == [{"1g.10gb": 7}, None, {"7g.80gb": 1}]


def test_devices_all_covers_every_gpu():
    text = config(half=[{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}])
    assert apply_mig_config(H100, [None, None], text, "half") == [{"3g.40gb": 2}] * 2


def test_a_config_name_missing_from_the_file_fails():
    with pytest.raises(LayoutRefused, match="not found"):
        apply_mig_config(H100, [None], config(other=[]), "wanted")


def test_a_file_without_version_v1_fails():
    text = yaml.safe_dump({"mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}})
    with pytest.raises(LayoutRefused, match="version: v1"):
        apply_mig_config(H100, [None], text, "a")


def test_a_gpu_index_the_node_lacks_fails():
    text = config(a=[{"devices": [0, 2], "mig-enabled": False}])
    with pytest.raises(LayoutRefused, match=r"\[2\] do not exist"):
        apply_mig_config(H100, [None, None], text, "a")


def test_a_gpu_named_in_two_entries_fails():
    text = config(a=[{"devices": [0], "mig-enabled": False}, {"devices": "all", "mig-enabled": False}])
    with pytest.raises(LayoutRefused, match="two entries"):
        apply_mig_config(H100, [None, None], text, "a")


def test_a_layout_the_table_refuses_fails_for_the_whole_config():
    text = config(a=[{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}])
    with pytest.raises(LayoutRefused, match="maximum"):
        apply_mig_config(H100, [None], text, "a")
