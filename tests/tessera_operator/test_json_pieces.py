"""Lists decoded a piece at a time read exactly as json.loads reads them, and refuse what it refuses."""

from __future__ import annotations

import json

import pytest

from tessera.operator.json_pieces import loads_in_pieces

NODE = {"metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}
LIST = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"},
        "items": [NODE, {**NODE, "metadata": {"name": "gpu-1"}}, [], "ü", 1.5, None, True]}


@pytest.mark.parametrize("text", [
    json.dumps(LIST),
    json.dumps(LIST, indent=2),
    json.dumps(LIST, separators=(",", ":")),
    ' { "items" : [ ] , "empty" : { } } ',
    "{}",
    '{"items": [1], "items": [2]}',
    "[1, 2, 3]",
    '"a string"',
])
def test_a_document_decodes_as_json_loads_decodes_it(text):
    assert loads_in_pieces(text) == json.loads(text)


def test_bytes_are_read_as_utf_8():
    assert loads_in_pieces(json.dumps(LIST, ensure_ascii=False).encode()) == LIST


@pytest.mark.parametrize("text", [
    '{"items": [1, 2}', '{"items": [1 2]}', '{"a": 1 "b": 2}', '{"a" 1}', '{a: 1}', '{"a": 1} x', '{"items": [1,]}',
    '{"a": 1', '{"items": [',
])
def test_malformed_json_is_refused_as_json_loads_refuses_it(text):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads_in_pieces(text)
