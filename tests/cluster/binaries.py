"""Finds the test-cluster binaries, building them (cached) when needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm")


def bin_dir() -> Path:
    """Returns the folder with every binary.

    TESSERA_CLUSTER_BIN points at a prepared folder; otherwise build.sh runs,
    which returns in well under a second when its cache is already filled.
    """
    override = os.environ.get("TESSERA_CLUSTER_BIN")
    if override:
        folder = Path(override)
    else:
        out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True)
        folder = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in REQUIRED if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(f"test-cluster binaries missing in {folder}: {missing}")
    return folder
