"""Hostile requests against the frontend: each a body (or a method and path) and the 4xx it must get.

Each case names what the answer's error must mention (the field), so a test
checks the refusal is the clear one, not an accident.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_BODY_BYTES = 64 * 1024  # the corpus' frontend is configured with this limit


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    status: int
    mentions: str
    method: str = "POST"
    model: str = "hostile"
    chunked: bool = False


def tensor(**overrides) -> dict:
    return {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0], **overrides}


def request(*tensors: dict, **fields) -> bytes:
    return json.dumps({"inputs": list(tensors), **fields}).encode()


CASES = [
    Case("oversized body", request(tensor(shape=[20000], data=[1.0] * 20000)), 413, "bytes"),
    Case("oversized chunked body", request(tensor(shape=[20000], data=[1.0] * 20000)), 413, "bytes", chunked=True),
    Case("not JSON", b"{inputs: [", 400, "body: not JSON"),
    Case("invalid UTF-8", b'{"inputs": "\xff\xfe"}', 400, "body: not JSON"),
    Case("NaN literal", b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [NaN]}]}', 400,
         "body: not JSON"),
    Case("an infinite number", b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1e400]}]}',
         400, "body: not JSON"),
    Case("an integer beyond 64 bits as INT64", request(tensor(datatype="INT64", shape=[1], data=[2**70])), 422,
         "inputs[0].data"),
    Case("a JSON array", b"[1, 2, 3]", 400, "body: expected a JSON object"),
    Case("empty body", b"", 400, "body: not JSON"),
    Case("no inputs", b'{"outputs": []}', 400, "inputs"),
    Case("empty inputs", request(), 400, "inputs"),
    Case("inputs not a list", b'{"inputs": {"name": "x"}}', 400, "inputs"),
    Case("a tensor that is a number", b'{"inputs": [7]}', 400, "inputs[0]"),
    Case("empty tensor name", request(tensor(name="")), 400, "inputs[0].name"),
    Case("unknown datatype", request(tensor(datatype="FP128")), 400, "inputs[0].datatype"),
    Case("negative shape", request(tensor(shape=[-2])), 400, "inputs[0].shape"),
    Case("fractional shape", request(tensor(shape=[2.0])), 400, "inputs[0].shape"),
    Case("boolean shape", request(tensor(shape=[True, True])), 400, "inputs[0].shape"),
    Case("too many dimensions", request(tensor(shape=[1] * 17, data=[1.0])), 400, "inputs[0].shape"),
    Case("a shape of 2**40 elements", request(tensor(shape=[2**20, 2**20])), 413, "inputs[0].shape"),
    Case("data shorter than the shape", request(tensor(shape=[3])), 422, "inputs[0].data"),
    Case("data not a list", request(tensor(data="1,2")), 400, "inputs[0].data"),
    Case("strings as FP32", request(tensor(data=["1", "2"])), 422, "inputs[0].data"),
    Case("nulls as FP32", request(tensor(data=[None, None])), 422, "inputs[0].data"),
    Case("booleans as INT64", request(tensor(datatype="INT64", data=[True, False])), 422, "inputs[0].data"),
    Case("INT8 out of range", request(tensor(datatype="INT8", data=[1, 300])), 422, "inputs[0].data"),
    Case("floats as INT32", request(tensor(datatype="INT32", data=[1.5, 2])), 422, "inputs[0].data"),
    Case("numbers as BYTES", request(tensor(datatype="BYTES", data=[1, 2])), 422, "inputs[0].data"),
    Case("nested deeper than the shape", request(tensor(data=[[1.0], [2.0]])), 422, "inputs[0].data"),
    Case("a nesting bomb", b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": '
         + b"[" * 5000 + b"]" * 5000 + b"}]}", 400, "body: not JSON"),
    Case("65 tensors", request(*[tensor(name=f"x{i}") for i in range(65)]), 422, "inputs: 65 tensors"),
    Case("id that is not a string", request(tensor(), id=12), 400, "id"),
    Case("second tensor broken", request(tensor(), tensor(name="y", shape=[1], data=[])), 422, "inputs[1].data"),
    Case("unknown model", request(tensor()), 404, "model 'someone-else' not found", model="someone-else"),
    Case("GET on infer", b"", 405, "", method="GET"),
]
