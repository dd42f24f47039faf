"""The fetcher sidecar's protocol, over real HTTP: ready once fetched and checked, a failure once, idempotent."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from tessera.weights.digest import directory_digest
from tessera.weights.sidecar import FETCHES_AT_ONCE, Fetcher, server

from .sources import ADAPTER_FILES, write_files


@pytest.fixture
def store(tmp_path):
    """pvc:// sources: a folder as the pod mounts its claim."""
    sources = tmp_path / "sources"
    write_files(sources / "pvc" / "models" / "en", ADAPTER_FILES)
    return sources


@pytest.fixture
def sidecar(tmp_path, store):
    fetcher = Fetcher(tmp_path / "adapters", store, wait_s=10.0)
    httpd = server(fetcher, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", fetcher
    httpd.shutdown()
    httpd.server_close()


def ask(url, body):
    request = urllib.request.Request(url + "/v1/fetch", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_fetch_answers_ready_with_the_path_once_the_files_are_there_and_checked(sidecar, tmp_path, store):
    url, fetcher = sidecar
    digest = directory_digest(store / "pvc" / "models" / "en")
    status, body = ask(url, {"name": "en", "uri": "pvc://models/en", "digest": digest})
    assert (status, body) == (200, {"state": "ready", "path": str(tmp_path / "adapters" / "en")})
    assert directory_digest(tmp_path / "adapters" / "en") == digest


def test_asking_again_answers_ready_without_fetching_again(sidecar, store):
    url, fetcher = sidecar
    digest = directory_digest(store / "pvc" / "models" / "en")
    ask(url, {"name": "en", "uri": "pvc://models/en", "digest": digest})
    (store / "pvc" / "models" / "en" / "adapter_config.json").unlink()  # a new fetch would now fail
    assert ask(url, {"name": "en", "uri": "pvc://models/en", "digest": digest})[0] == 200


def test_a_digest_mismatch_is_answered_once_as_failed_then_tried_again(sidecar, tmp_path):
    url, fetcher = sidecar
    request = {"name": "en", "uri": "pvc://models/en", "digest": "sha256:" + "0" * 64}
    status, body = ask(url, request)
    assert status == 422 and body["state"] == "failed" and "digest mismatch for pvc://models/en" in body["message"]
    assert not (tmp_path / "adapters" / "en").exists()
    assert ask(url, request)[0] == 422  # tried again, failed again: never a copy of other weights


def test_a_fetch_longer_than_the_wait_answers_fetching(tmp_path, store):
    fetcher = Fetcher(tmp_path / "adapters", store, wait_s=0.0)
    for _ in range(FETCHES_AT_ONCE):
        fetcher.slots.acquire()  # every fetch slot taken: the fetch waits
    httpd = server(fetcher, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    digest = directory_digest(store / "pvc" / "models" / "en")
    try:
        assert ask(url, {"name": "en", "uri": "pvc://models/en", "digest": digest}) == (202, {"state": "fetching"})
        done = fetcher.running["en"][1]
        fetcher.slots.release(FETCHES_AT_ONCE)
        done.wait(10)
        assert ask(url, {"name": "en", "uri": "pvc://models/en", "digest": digest})[0] == 200
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("body", [{"name": "../etc", "uri": "pvc://models/en", "digest": "x"},
                                  {"name": "en", "uri": "pvc://models/en"},
                                  {"name": "en", "uri": "pvc://models/en", "digest": "x", "waitSeconds": 60}])
def test_a_name_that_is_not_a_dns_label_a_missing_field_or_a_wait_beyond_the_cap_is_refused(sidecar, body):
    assert ask(sidecar[0], body)[0] == 400


def test_a_restarted_sidecar_clears_staging_left_by_a_cut_fetch_and_keeps_checked_copies(tmp_path, store):
    root = tmp_path / "adapters"
    digest = directory_digest(store / "pvc" / "models" / "en")
    first = Fetcher(root, store)
    assert first.ask("en", ("pvc://models/en", digest))[0] == 200
    (root / ".en.cut-short").mkdir()
    (root / ".en.cut-short" / "part.bin").write_bytes(b"x")
    httpd = server(Fetcher(root, store), "127.0.0.1", 0)  # the sidecar's container restarted
    httpd.server_close()
    assert sorted(p.name for p in root.iterdir()) == [".verified", "en"]


def test_a_request_with_no_wait_only_starts_the_fetch(tmp_path, store):
    fetcher = Fetcher(tmp_path / "adapters", store, wait_s=10.0)
    digest = directory_digest(store / "pvc" / "models" / "en")
    for _ in range(FETCHES_AT_ONCE):
        fetcher.slots.acquire()
    try:
        assert fetcher.ask("en", ("pvc://models/en", digest), wait_s=0.0) == (202, {"state": "fetching"})
        assert "en" in fetcher.running
    finally:
        fetcher.slots.release(FETCHES_AT_ONCE)
