"""AdapterPools' loads (operator/reconcile/adapter_pools.py) against the vLLM stand-in and tessera's own fetcher:
each adapter fetched and checked before its load, and what each answer counts for the failure record
(adapter_loading.record_failures). Real HTTP on 127.0.0.1, no cluster."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cluster.vllm_standin import VllmStandin
from cluster.weights_store import adapter_files, files_digest
from tessera.operator.fetcher import FetcherClient
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.adapter_loading import Listed
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.settings import OperatorSettings
from tessera.operator.vllm import VllmClient
from tessera.weights.sidecar import FETCHES_AT_ONCE, Fetcher, server

from .test_adapter_loading import RETRY, SERVER, pod

NAMES = ("billing", "shipping")
WEIGHTS = {SERVER: {name: (f"pvc://store/{name}", files_digest(adapter_files(name))) for name in NAMES}}
PLACED = {SERVER: {name: "s" for name in NAMES}}


@pytest.fixture
def fetcher(tmp_path):
    """tessera's fetcher sidecar, fetching from a folder as a pod mounts its claim (pvc://store/<name>)."""
    for name in NAMES:
        folder = tmp_path / "sources" / "pvc" / "store" / name
        folder.mkdir(parents=True)
        for rel, data in adapter_files(name).items():
            (folder / rel).write_bytes(data)
    sidecar = Fetcher(tmp_path / "adapters", tmp_path / "sources")
    httpd = server(sidecar, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def standin(tmp_path):
    """Finds an adapter only where the fetcher put its files."""
    server = VllmStandin(adapter_root=tmp_path / "adapters").start()
    yield server
    server.stop()


def pools() -> AdapterPools:
    return AdapterPools(Actor(None, VllmClient(2), FetcherClient(15)), OperatorSettings())  # type: ignore[arg-type]


def closed_port_url() -> str:
    with socket.socket() as probe:  # a port nothing listens on once closed: the connection is refused
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def listed_at(standin: VllmStandin, name: str, fetch_url: str) -> Listed:
    return Listed(standin.url_template.format(namespace="shop", pod=name), adapters=frozenset(), fetch_url=fetch_url)


def test_the_stand_in_refuses_a_load_whose_files_are_not_there_as_vllm_does(standin):
    url = standin.url_template.format(namespace="shop", pod="unfetched")
    with pytest.raises(Exception, match="No adapter found for /adapters/billing"):
        VllmClient(2).load_adapter(url, "billing", "/adapters/billing")


def test_each_adapter_is_fetched_and_checked_before_its_load(standin, fetcher, tmp_path):
    loading = pod("loading")
    errors = pools().load_missing([loading], PLACED, {loading["metadata"]["uid"]: listed_at(standin, "loading", fetcher)},
                                  RETRY, WEIGHTS)
    assert errors["shop/loading"] == {"billing": None, "shipping": None}
    assert standin.paths("shop", "loading") == {"billing": "/adapters/billing", "shipping": "/adapters/shipping"}
    assert (tmp_path / "adapters" / "billing" / "adapter_model.safetensors").read_bytes() == adapter_files("billing")[
        "adapter_model.safetensors"]


def test_a_digest_mismatch_counts_as_a_failed_load_with_the_fetchers_error_and_is_never_loaded(standin, fetcher):
    mismatching = pod("mismatching")
    weights = {SERVER: {**WEIGHTS[SERVER], "shipping": ("pvc://store/shipping", "sha256:" + "0" * 64)}}
    errors = pools().load_missing([mismatching], PLACED,
                                  {mismatching["metadata"]["uid"]: listed_at(standin, "mismatching", fetcher)},
                                  RETRY, weights)
    assert errors["shop/mismatching"]["billing"] is None
    assert "digest mismatch for pvc://store/shipping" in (errors["shop/mismatching"]["shipping"] or "")
    assert standin.listed("shop", "mismatching") == ["billing"]
    assert standin.loads("shop", "mismatching") == 1  # vLLM was never asked to load shipping


def test_a_refused_load_counts_with_the_engines_error_and_one_the_server_does_not_answer_does_not(standin, fetcher):
    standin.missing.add("/adapters/shipping")
    refusing, gone = pod("refusing"), pod("gone")
    listed = {refusing["metadata"]["uid"]: listed_at(standin, "refusing", fetcher),
              gone["metadata"]["uid"]: Listed(closed_port_url(), adapters=frozenset(), fetch_url=fetcher)}
    errors = pools().load_missing([refusing, gone], PLACED, listed, RETRY, WEIGHTS)
    assert errors["shop/refusing"]["billing"] is None
    assert "No adapter found for /adapters/shipping" in (errors["shop/refusing"]["shipping"] or "")
    assert errors["shop/gone"] == {}


def test_a_fetcher_that_does_not_answer_counts_nothing_and_loads_nothing(standin):
    waiting = pod("waiting")
    errors = pools().load_missing([waiting], PLACED,
                                  {waiting["metadata"]["uid"]: listed_at(standin, "waiting", closed_port_url())},
                                  RETRY, WEIGHTS)
    assert errors["shop/waiting"] == {} and standin.loads("shop", "waiting") == 0


def test_an_unplaced_adapter_is_unloaded_from_the_server_only_once_its_route_no_longer_lists_the_pod():
    standin = VllmStandin().start()
    try:
        server_pod = pod("server")
        url = standin.url_template.format(namespace="shop", pod="server")
        VllmClient(2).load_adapter(url, "moved", "/adapters/moved")
        listed = {server_pod["metadata"]["uid"]: Listed(url, adapters=frozenset(standin.listed("shop", "server")))}
        placed = {SERVER: {"billing": "s"}}
        assert pools().unload_unplaced([server_pod], placed, listed, {(server_pod["metadata"]["uid"], "moved")}) == 1
        assert standin.listed("shop", "server") == ["moved"]  # its route still lists the pod: kept
        assert pools().unload_unplaced([server_pod], placed, listed, set()) == 0
        assert standin.listed("shop", "server") == []
    finally:
        standin.stop()


def test_fetches_that_outlast_the_sidecars_wait_cost_the_pod_one_wait_and_are_all_started(standin, tmp_path):
    """With the sidecar's fetch slots all taken, every fetch outlasts its wait: the first load waits for it, the
    others only start theirs, and none counts against its adapter."""
    names = ("billing", "returns", "shipping")
    sidecar = Fetcher(tmp_path / "adapters", tmp_path / "sources", wait_s=2.0)
    for _ in range(FETCHES_AT_ONCE):
        sidecar.slots.acquire()
    httpd = server(sidecar, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    slow = pod("slow")
    weights = {SERVER: {name: (f"pvc://store/{name}", "sha256:" + "0" * 64) for name in names}}
    try:
        started = time.monotonic()
        errors = pools().load_missing([slow], {SERVER: {name: "s" for name in names}},
                                      {slow["metadata"]["uid"]: listed_at(standin, "slow",
                                                                          f"http://127.0.0.1:{httpd.server_address[1]}")},
                                      RETRY, weights)
        elapsed = time.monotonic() - started
        assert errors["shop/slow"] == {} and standin.loads("shop", "slow") == 0
        assert sorted(sidecar.running) == sorted(names)
        assert 2.0 <= elapsed < 4.0  # one wait of 2 s, not three
    finally:
        sidecar.slots.release(FETCHES_AT_ONCE)
        httpd.shutdown()
        httpd.server_close()
