"""The digest of a folder of weights: sha256sum's lines over its files, sorted; the same without tessera."""

import hashlib
import subprocess

import pytest
from click.testing import CliRunner

from tessera.cli import main
from tessera.weights.digest import WeightsError, directory_digest

from .sources import ADAPTER_FILES, write_files


def test_the_digest_is_sha256_over_sha256sums_lines_sorted_by_path(tmp_path):
    write_files(tmp_path, {"b.json": b"b", "a/x.bin": b"x"})
    lines = (f"{hashlib.sha256(b'x').hexdigest()}  a/x.bin\n"
             f"{hashlib.sha256(b'b').hexdigest()}  b.json\n")
    assert directory_digest(tmp_path) == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def test_the_documented_shell_pipeline_gives_the_same_digest(tmp_path):
    write_files(tmp_path, {**ADAPTER_FILES, "sub/dir/Z.txt": b"z", "sub/a.txt": b"a"})
    shell = ("cd \"$1\" && find . -type f | sed 's|^\\./||' | LC_ALL=C sort | tr '\\n' '\\0' "
             "| xargs -0 sha256sum | sha256sum | cut -d' ' -f1")
    out = subprocess.run(["bash", "-c", shell, "-", str(tmp_path)], check=True, capture_output=True, text=True)
    assert directory_digest(tmp_path) == "sha256:" + out.stdout.strip()


def test_a_changed_byte_or_a_renamed_file_changes_the_digest(tmp_path):
    one, two, three = (write_files(tmp_path / n, f) for n, f in [
        ("one", {"w.bin": b"weights"}), ("two", {"w.bin": b"weightz"}), ("three", {"v.bin": b"weights"})])
    assert len({directory_digest(one), directory_digest(two), directory_digest(three)}) == 3


def test_empty_folders_do_not_count(tmp_path):
    write_files(tmp_path / "a", {"w.bin": b"w"})
    write_files(tmp_path / "b", {"w.bin": b"w"})
    (tmp_path / "b" / "empty").mkdir()
    assert directory_digest(tmp_path / "a") == directory_digest(tmp_path / "b")


def test_a_link_is_refused(tmp_path):
    write_files(tmp_path, {"w.bin": b"w"})
    (tmp_path / "link").symlink_to("/etc/passwd")
    with pytest.raises(WeightsError, match="links are refused"):
        directory_digest(tmp_path)


def test_tessera_weights_digest_prints_the_folders_digest(tmp_path):
    write_files(tmp_path, ADAPTER_FILES)
    result = CliRunner().invoke(main, ["weights", "digest", str(tmp_path)])
    assert result.exit_code == 0 and result.output.strip() == directory_digest(tmp_path)
