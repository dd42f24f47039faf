"""The client methods whose validators the operator builds at start are every one it calls."""

from __future__ import annotations

import re
from pathlib import Path

from kubernetes import client

from tessera.operator.cluster import CLIENT_CALLS, build_client_validators

OPERATOR = Path(__file__).resolve().parents[2] / "operator"
ATTRIBUTES = {"core": client.CoreV1Api, "apps": client.AppsV1Api, "batch": client.BatchV1Api,
              "custom": client.CustomObjectsApi, "api": client.CoordinationV1Api, "discovery": client.DiscoveryV1Api,
              "apis": client.ApisApi}
CALL = re.compile(r"\b(?:self\.)?(core|apps|batch|custom|api|discovery|apis)\.([a-z_]+)\(")
# A list method passed on to be called, e.g. Cluster._labelled_in_watched(selector, self.core.list_..., ...).
PASSED = re.compile(r"\bself\.(core|apps|batch|custom|api|discovery|apis)\.(list_[a-z_]+)\s*[,)]")
DIRECT = re.compile(r"client\.(\w+Api)\([^)]*\)\.([a-z_]+)\(")


def called_client_methods() -> set[tuple[type, str]]:
    called = set()
    for path in OPERATOR.glob("*.py"):
        text = path.read_text()
        called |= {(ATTRIBUTES[attribute], method) for attribute, method in CALL.findall(text) + PASSED.findall(text)}
        called |= {(getattr(client, api), method) for api, method in DIRECT.findall(text)}
    return called


def test_every_client_method_the_operator_calls_gets_its_validator_built_at_start():
    listed = {(api, method) for api, methods in CLIENT_CALLS.items() for method in methods}
    assert called_client_methods() - listed == set()


def test_every_listed_method_exists_on_its_api():
    assert [(api.__name__, m) for api, methods in CLIENT_CALLS.items() for m in methods if not hasattr(api, m)] == []


def test_building_the_validators_sends_no_request():
    build_client_validators()  # the default client points at no server: a request would raise
