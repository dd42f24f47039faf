"""The twin's C kernel is called only when it was built from the source beside it (planner/twin/ckernel.py).

An editable install keeps the kernel setup.py compiled at install time; once the source changes, the old
library's arguments may no longer match the caller's, and calling it crashes the process.
"""

import shutil
import subprocess

import pytest

from tessera.planner.twin import ckernel


def build(tmp_path, tag: str):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    library = tmp_path / f"kernel_{tag or 'untagged'}.so"
    flags = [f'-DTESSERA_KERNEL_SOURCE="{tag}"'] if tag else []
    subprocess.run([cc, "-O2", "-shared", "-fPIC", *flags, "-o", str(library), str(ckernel._SRC), "-lm"], check=True)
    return library


def test_a_kernel_built_from_this_source_is_used(tmp_path):
    assert ckernel._built_from_source(build(tmp_path, ckernel.source_tag()))


def test_a_kernel_built_from_another_source_is_not(tmp_path):
    assert not ckernel._built_from_source(build(tmp_path, "0123456789abcdef"))
    assert not ckernel._built_from_source(build(tmp_path, ""))
