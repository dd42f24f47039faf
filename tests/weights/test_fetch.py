"""Fetching pinned weights from real stores here (HTTPS, moto's S3 server, a mounted folder), checked by digest."""

import pytest
from click.testing import CliRunner

from tessera.cli import main
from tessera.exit_codes import BAD_INPUT
from tessera.weights.digest import WeightsError, directory_digest
from tessera.weights.fetch import fetch, unsupported_scheme

from .sources import ADAPTER_FILES, https_store, s3_put, s3_store, tar_of, write_files

DIGEST = None  # computed per test from the files themselves

def digest_of(tmp_path, files):
    return directory_digest(write_files(tmp_path / "reference", files))

@pytest.fixture
def https(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "adapter.tar.gz").write_bytes(tar_of(ADAPTER_FILES))
    (root / "adapter.tar").write_bytes(tar_of(ADAPTER_FILES, gzip=False))
    (root / "evil.tar.gz").write_bytes(tar_of({"../outside.txt": b"x"}))
    certs = tmp_path / "certs"
    certs.mkdir()
    with https_store(root, certs) as url:
        yield url

@pytest.mark.parametrize("archive", ["adapter.tar.gz", "adapter.tar"])
def test_an_https_archive_is_unpacked_and_checked(tmp_path, https, archive):
    dest = tmp_path / "adapters" / "a1"
    fetch(f"{https}/{archive}", digest_of(tmp_path, ADAPTER_FILES), dest, tmp_path / "sources")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == ADAPTER_FILES

def test_a_digest_mismatch_fails_with_both_digests_and_leaves_nothing(tmp_path, https):
    dest = tmp_path / "adapters" / "a1"
    wrong = "sha256:" + "0" * 64
    with pytest.raises(WeightsError, match=f"digest mismatch for {https}/adapter.tar.gz: its files have sha256:.*"
                                           f"the spec pins {wrong}; not used"):
        fetch(f"{https}/adapter.tar.gz", wrong, dest, tmp_path / "sources")
    assert list((tmp_path / "adapters").iterdir()) == []

def test_a_mismatching_new_source_keeps_the_checked_copy_in_place(tmp_path, https):
    dest = tmp_path / "adapters" / "a1"
    fetch(f"{https}/adapter.tar.gz", digest_of(tmp_path, ADAPTER_FILES), dest, tmp_path / "sources")
    with pytest.raises(WeightsError, match="digest mismatch"):
        fetch(f"{https}/adapter.tar.gz", "sha256:" + "1" * 64, dest, tmp_path / "sources")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == ADAPTER_FILES

def test_an_archive_member_outside_the_folder_is_refused(tmp_path, https):
    with pytest.raises(WeightsError, match="outside"):
        fetch(f"{https}/evil.tar.gz", "sha256:" + "0" * 64, tmp_path / "adapters" / "a1", tmp_path / "sources")
    assert not (tmp_path / "adapters" / "outside.txt").exists()

def test_a_missing_https_object_fails_naming_it(tmp_path, https):
    with pytest.raises(WeightsError, match=f"fetching {https}/nothing.tar: HTTP Error 404"):
        fetch(f"{https}/nothing.tar", "sha256:" + "0" * 64, tmp_path / "adapters" / "a1", tmp_path / "sources")

def test_an_s3_prefix_is_fetched_as_a_folder_and_checked(tmp_path, monkeypatch):
    files = {**ADAPTER_FILES, "extra/tokenizer.json": b"{}"}
    with s3_store() as env:
        s3_put(env, "adapters", "support/en", files)
        s3_put(env, "adapters", "support/en-other", {"x.bin": b"not this one"})
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        dest = tmp_path / "adapters" / "en"
        fetch("s3://adapters/support/en", digest_of(tmp_path, files), dest, tmp_path / "sources")
    assert directory_digest(dest) == digest_of(tmp_path / "again", files)
    assert (dest / "extra" / "tokenizer.json").read_bytes() == b"{}"

def test_s3_without_the_right_credentials_fails_with_the_stores_error(tmp_path, monkeypatch):
    with s3_store() as env:
        s3_put(env, "adapters", "en", ADAPTER_FILES)
        for key, value in {**env, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        with pytest.raises(WeightsError, match="fetching s3://adapters/nothing"):
            fetch("s3://adapters/nothing", "sha256:" + "0" * 64, tmp_path / "a", tmp_path / "sources")

def test_an_empty_s3_prefix_is_an_error_not_an_empty_adapter(tmp_path, monkeypatch):
    with s3_store() as env:
        s3_put(env, "adapters", "en", ADAPTER_FILES)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(WeightsError, match="no objects under s3://adapters/fr/"):
            fetch("s3://adapters/fr", "sha256:" + "0" * 64, tmp_path / "a", tmp_path / "sources")

def test_a_pvc_folder_is_copied_from_where_the_pod_mounts_the_claim(tmp_path):
    sources = tmp_path / "sources"
    write_files(sources / "pvc" / "models" / "lora" / "en", ADAPTER_FILES)
    dest = tmp_path / "adapters" / "en"
    fetch("pvc://models/lora/en", digest_of(tmp_path, ADAPTER_FILES), dest, sources)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == ADAPTER_FILES

def test_a_pvc_folder_not_mounted_fails_saying_so(tmp_path):
    with pytest.raises(WeightsError, match="is the claim mounted"):
        fetch("pvc://models/lora/en", "sha256:" + "0" * 64, tmp_path / "a", tmp_path / "sources")

@pytest.mark.parametrize("uri", ["gs://b/a", "hf://org/model", "oci://registry/a:1"])
def test_schemes_not_fetched_yet_are_refused_by_name(tmp_path, uri):
    scheme = uri.split(":")[0]
    assert unsupported_scheme(uri).startswith(f"{scheme}:// weights are not supported yet")
    with pytest.raises(WeightsError, match="not supported yet"):
        fetch(uri, "sha256:" + "0" * 64, tmp_path / "a", tmp_path / "sources")


def test_tessera_weights_fetch_puts_the_checked_copy_where_the_init_container_says(tmp_path, https):
    dest = tmp_path / "models" / "base" / "model"
    result = CliRunner().invoke(main, ["weights", "fetch", f"{https}/adapter.tar.gz", digest_of(tmp_path, ADAPTER_FILES),
                                       str(dest)])
    assert result.exit_code == 0 and {p.name for p in dest.iterdir()} == set(ADAPTER_FILES)


def test_tessera_weights_fetch_of_mismatching_weights_fails_the_init_container_with_the_reason(tmp_path, https):
    result = CliRunner().invoke(main, ["weights", "fetch", f"{https}/adapter.tar.gz", "sha256:" + "0" * 64,
                                       str(tmp_path / "model")])
    assert result.exit_code == BAD_INPUT and "digest mismatch" in result.output and not (tmp_path / "model").exists()


def test_tessera_weights_verify_checks_a_mounted_folder_in_place(tmp_path):
    folder = write_files(tmp_path / "claim" / "qwen", ADAPTER_FILES)
    digest = directory_digest(folder)
    assert CliRunner().invoke(main, ["weights", "verify", str(folder), digest]).exit_code == 0
    assert CliRunner().invoke(main, ["weights", "verify", str(folder), "sha256:" + "0" * 64]).exit_code == BAD_INPUT
