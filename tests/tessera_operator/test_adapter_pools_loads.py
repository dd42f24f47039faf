"""AdapterPools' loads (operator/reconcile/adapter_pools.py) against the vLLM stand-in: what each load's answer
counts for the failure record (adapter_loading.record_failures). Real HTTP on 127.0.0.1, no cluster."""

from __future__ import annotations

import socket

import pytest

from cluster.vllm_standin import VllmStandin
from tessera.operator.reconcile.act import Actor
from tessera.operator.reconcile.adapter_loading import Listed
from tessera.operator.reconcile.adapter_pools import AdapterPools
from tessera.operator.settings import OperatorSettings
from tessera.operator.vllm import VllmClient

from .test_adapter_loading import RETRY, SERVER, pod


@pytest.fixture
def standin():
    server = VllmStandin().start()
    yield server
    server.stop()


def closed_port_url() -> str:
    with socket.socket() as probe:  # a port nothing listens on once closed: the connection is refused
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_a_refused_load_counts_with_the_engines_error_and_one_the_server_does_not_answer_does_not(standin):
    standin.missing.add("/adapters/shipping")
    pools = AdapterPools(Actor(None, VllmClient(2)), OperatorSettings())  # type: ignore[arg-type]  # loads only
    refusing, gone = pod("refusing"), pod("gone")
    listed = {refusing["metadata"]["uid"]: Listed(standin.url_template.format(namespace="shop", pod="refusing"),
                                                   adapters=frozenset()),
              gone["metadata"]["uid"]: Listed(closed_port_url(), adapters=frozenset())}
    errors = pools.load_missing([refusing, gone], {SERVER: {"billing": "s", "shipping": "s"}}, listed, RETRY)
    assert errors["shop/refusing"]["billing"] is None
    assert "No adapter found for /adapters/shipping" in (errors["shop/refusing"]["shipping"] or "")
    assert errors["shop/gone"] == {}


def test_an_unplaced_adapter_is_unloaded_from_the_server_only_once_its_route_no_longer_lists_the_pod(standin):
    pools = AdapterPools(Actor(None, VllmClient(2)), OperatorSettings())  # type: ignore[arg-type]  # unloads only
    server = pod("server")
    url = standin.url_template.format(namespace="shop", pod="server")
    VllmClient(2).load_adapter(url, "moved", "/adapters/moved")
    listed = {server["metadata"]["uid"]: Listed(url, adapters=frozenset(standin.listed("shop", "server")))}
    placed = {SERVER: {"billing": "s"}}
    assert pools.unload_unplaced([server], placed, listed, {(server["metadata"]["uid"], "moved")}) == 1
    assert standin.listed("shop", "server") == ["moved"]  # its route still lists the pod: kept
    assert pools.unload_unplaced([server], placed, listed, set()) == 0
    assert standin.listed("shop", "server") == []
