"""The operator's vLLM client (operator/vllm.py) against the stand-in server (tests/cluster/vllm_standin.py).

Real HTTP on 127.0.0.1. The stand-in answers as vLLM 0.8.5 does (the pinned
contract, docs/adapter-loading.md); these tests pin the requests tessera
sends and what it makes of each answer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from cluster.vllm_standin import BASE_MODEL, VllmStandin
from tessera.operator.vllm import LOAD_PATH, MODELS_PATH, ServerError, VllmClient

CLIENT = VllmClient(timeout_s=5)


@pytest.fixture
def standin():
    server = VllmStandin(max_cpu_loras=2).start()
    yield server
    server.stop()


def url(standin: VllmStandin, pod: str = "server-0-a") -> str:
    return standin.url_template.format(namespace="shop", pod=pod)


def test_the_contract_pinned_is_vllm_0_8_5s_paths():
    assert (MODELS_PATH, LOAD_PATH) == ("/v1/models", "/v1/load_lora_adapter")


def test_a_fresh_server_lists_no_adapter_only_its_base_model(standin):
    with urllib.request.urlopen(url(standin) + MODELS_PATH) as response:
        assert [card["id"] for card in json.load(response)["data"]] == [BASE_MODEL]
    assert CLIENT.loaded_adapters(url(standin)) == frozenset()


def test_a_loaded_adapter_is_listed_under_its_name_with_its_path(standin):
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    assert CLIENT.loaded_adapters(url(standin)) == {"billing"}
    assert standin.paths("shop", "server-0-a") == {"billing": "/adapters/billing"}


def test_the_load_request_is_json_with_lora_name_and_lora_path(standin):
    form = urllib.request.Request(url(standin) + LOAD_PATH, data=b"lora_name=a&lora_path=/a", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(form)
    assert refused.value.code == 415
    CLIENT.load_adapter(url(standin), "a", "/adapters/a")
    assert standin.listed("shop", "server-0-a") == ["a"]


def test_loading_an_adapter_the_server_lists_already_counts_as_loaded(standin):
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    assert CLIENT.loaded_adapters(url(standin)) == {"billing"}


def test_an_adapter_missing_at_its_path_is_refused_with_vllms_message(standin):
    standin.missing.add("/adapters/broken")
    with pytest.raises(ServerError) as refused:
        CLIENT.load_adapter(url(standin), "broken", "/adapters/broken")
    assert refused.value.status == 404 and "No adapter found for /adapters/broken" in str(refused.value)
    assert CLIENT.loaded_adapters(url(standin)) == frozenset()


def test_a_server_without_the_runtime_update_switch_refuses_every_load(standin):
    standin.runtime_updating = False
    with pytest.raises(ServerError) as refused:
        CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    assert refused.value.status == 404 and str(refused.value) == "Not Found"


def test_a_server_not_up_yet_gives_no_answer(standin):
    standin.hold_new = True
    with pytest.raises(ServerError) as silent:
        CLIENT.loaded_adapters(url(standin))
    assert silent.value.status is None
    standin.release()
    assert CLIENT.loaded_adapters(url(standin)) == frozenset()


def test_adapters_evicted_from_the_cpu_cache_stay_registered_and_listed(standin):
    for name in ("a", "b", "c"):  # max_cpu_loras 2: "a" leaves the CPU cache
        CLIENT.load_adapter(url(standin), name, f"/adapters/{name}")
    assert list(standin.processes[("shop", "server-0-a")].cache) == ["b", "c"]
    assert CLIENT.loaded_adapters(url(standin)) == {"a", "b", "c"}


def test_a_restarted_server_lists_none_of_the_adapters_it_had(standin):
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    standin.restart("shop", "server-0-a")
    assert CLIENT.loaded_adapters(url(standin)) == frozenset()


def test_each_pod_is_its_own_server(standin):
    CLIENT.load_adapter(url(standin, "server-0-a"), "billing", "/adapters/billing")
    assert CLIENT.loaded_adapters(url(standin, "server-0-b")) == frozenset()


def test_an_unload_removes_the_registration_and_one_not_registered_is_gone_already(standin):
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    CLIENT.unload_adapter(url(standin), "billing")
    assert CLIENT.loaded_adapters(url(standin)) == frozenset()
    CLIENT.unload_adapter(url(standin), "billing")  # vLLM's 404: nothing to remove
    CLIENT.load_adapter(url(standin), "billing", "/adapters/billing")
    assert standin.loads("shop", "server-0-a") == 2  # loaded again after the unload, not "already loaded"
