"""Who may use a GPU pool (operator/reconcile/pool_access.py): the namespaces an admin's selector admits."""

from pathlib import Path

import yaml

from tessera.operator.api.systems import read_system
from tessera.operator.api.status import POOL_NOT_ALLOWED
from tessera.operator.reconcile.pool_access import Admitted, denied

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-model.yaml"
POOL = "NVIDIA-H100-80GB-HBM3"


def system(namespace: str):
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"].update(namespace=namespace, uid=f"u-{namespace}", generation=1)
    return read_system(document)


def test_a_pool_without_a_rule_is_open_to_every_namespace():
    assert denied([system("team-a"), system("team-b")], POOL, {}) == {}


def test_a_system_in_a_namespace_the_selector_admits_may_use_the_pool():
    rules = {POOL: Admitted("team=vision", frozenset({"team-a"}))}
    assert denied([system("team-a")], POOL, rules) == {}


def test_a_system_outside_the_selected_namespaces_is_refused_naming_the_namespace_and_the_selector():
    rules = {POOL: Admitted("team=vision", frozenset({"team-a"}))}
    (reason, message), = denied([system("team-a"), system("team-b")], POOL, rules).values()
    assert reason == POOL_NOT_ALLOWED
    assert "'team-b'" in message and "'team=vision'" in message and POOL in message


def test_a_rule_for_another_pool_leaves_this_one_open():
    rules = {"NVIDIA-A100-SXM4-80GB": Admitted("team=vision", frozenset())}
    assert denied([system("team-b")], POOL, rules) == {}


def test_a_selector_the_api_server_refused_admits_no_one_and_says_why():
    rules = {POOL: Admitted("team in (", error="unable to parse requirement: found '(', expected: identifier")}
    (reason, message), = denied([system("team-a")], POOL, rules).values()
    assert reason == POOL_NOT_ALLOWED and "unable to parse requirement" in message
