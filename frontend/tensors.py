"""Open Inference Protocol v2 bodies: a client's request checked, a server's response read, split and gathered.

Everything a client sends is checked before any of it goes on: a JSON object
whose `inputs` are tensors with a name, a known datatype, a shape of
non-negative integers and exactly that many elements of that datatype (flat
or nested as the shape says). A failure raises `BadRequest` naming the field.
Tensors travel on with flat data, which is what splitting indexes.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

MAX_TENSORS = 64
MAX_DIMS = 16
MAX_NAME = 256

INTEGER_RANGES = {
    "UINT8": (0, 2**8 - 1), "UINT16": (0, 2**16 - 1), "UINT32": (0, 2**32 - 1), "UINT64": (0, 2**64 - 1),
    "INT8": (-(2**7), 2**7 - 1), "INT16": (-(2**15), 2**15 - 1), "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
}
FLOATS = {"FP16", "FP32", "FP64", "BF16"}
DATATYPES = {"BOOL", "BYTES", *INTEGER_RANGES, *FLOATS}

Tensor = dict[str, Any]


class BadRequest(ValueError):
    """A client's body tessera refuses: `status` (400, 413, 422) and a message naming the field."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: bytes, max_elements: int) -> tuple[list[Tensor], str | None]:
    """The request's input tensors (flat data) and its id; BadRequest for anything else."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"body: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise BadRequest("body: expected a JSON object with 'inputs'")
    inputs = document.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("inputs: expected a non-empty list of tensors")
    if len(inputs) > MAX_TENSORS:
        raise BadRequest(f"inputs: {len(inputs)} tensors, at most {MAX_TENSORS}", 422)
    request_id = document.get("id")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > MAX_NAME):
        raise BadRequest(f"id: expected a string of at most {MAX_NAME} characters")
    budget = max_elements
    tensors = []
    for i, tensor in enumerate(inputs):
        checked = check_tensor(tensor, f"inputs[{i}]", budget)
        budget -= len(checked["data"])
        tensors.append(checked)
    return tensors, request_id


def check_tensor(tensor: Any, where: str, max_elements: int) -> Tensor:
    if not isinstance(tensor, dict):
        raise BadRequest(f"{where}: expected a tensor object (name, shape, datatype, data)")
    name, datatype, shape, data = (tensor.get(k) for k in ("name", "datatype", "shape", "data"))
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise BadRequest(f"{where}.name: expected a string of 1-{MAX_NAME} characters")
    if datatype not in DATATYPES:
        raise BadRequest(f"{where}.datatype: {str(datatype)[:40]!r} is not one of {', '.join(sorted(DATATYPES))}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise BadRequest(f"{where}.shape: expected a list of at most {MAX_DIMS} non-negative integers")
    elements = math.prod(shape)
    if elements > max_elements:
        raise BadRequest(f"{where}.shape: {elements} elements, more than the {max_elements} a request may carry",
                         413)
    if not isinstance(data, list):
        raise BadRequest(f"{where}.data: expected a list")
    flat = _flatten(data, len(shape), where)
    if len(flat) != elements:
        raise BadRequest(f"{where}.data: {len(flat)} elements, shape {shape} holds {elements}", 422)
    _check_elements(flat, datatype, where)
    return {"name": name, "datatype": datatype, "shape": shape, "data": flat}


def _flatten(data: list[Any], depth: int, where: str) -> list[Any]:
    """Nested lists (at most `depth` levels, the shape's) to one flat list."""
    if not any(type(item) is list for item in data):
        return data
    if depth <= 1:
        raise BadRequest(f"{where}.data: nested deeper than its shape", 422)
    flat: list[Any] = []
    for item in data:
        if type(item) is list:
            flat.extend(_flatten(item, depth - 1, where))
        else:
            flat.append(item)
    return flat


def _check_elements(flat: list[Any], datatype: str, where: str) -> None:
    if datatype == "BOOL":
        good = all(type(x) is bool for x in flat)
    elif datatype == "BYTES":
        good = all(type(x) is str for x in flat)
    elif datatype in FLOATS:
        good = all(type(x) is float or type(x) is int for x in flat)
    else:
        low, high = INTEGER_RANGES[datatype]
        good = all(type(x) is int for x in flat) and (not flat or (low <= min(flat) and max(flat) <= high))
    if not good:
        raise BadRequest(f"{where}.data: an element is not of datatype {datatype}", 422)


class BadResponse(ValueError):
    """A server's body that is not an inference response."""


def parse_response(body: bytes) -> list[Tensor]:
    """A server's output tensors (flat data); BadResponse if it sent something else."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadResponse(f"not JSON ({error})") from None
    outputs = document.get("outputs") if isinstance(document, dict) else None
    if not isinstance(outputs, list):
        raise BadResponse("no 'outputs' list")
    tensors = []
    for i, tensor in enumerate(outputs):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("data"), list) \
                or not isinstance(tensor.get("shape"), list):
            raise BadResponse(f"outputs[{i}]: not a tensor")
        shape = tensor["shape"]
        flat = _flatten_response(tensor["data"])
        if not all(type(d) is int and d >= 0 for d in shape) or math.prod(shape) != len(flat):
            raise BadResponse(f"outputs[{i}]: shape {shape} does not hold its {len(flat)} elements")
        tensors.append({"name": str(tensor.get("name")), "datatype": tensor.get("datatype"), "shape": shape,
                        "data": flat})
    return tensors


def _flatten_response(data: list[Any]) -> list[Any]:
    try:
        return _flatten(data, MAX_DIMS, "response")
    except BadRequest as error:
        raise BadResponse(str(error)) from None


def split(outputs: list[Tensor], name: str) -> list[list[Tensor]]:
    """One input list per item (first dimension) of the output `name`; KeyError if it has none."""
    tensor = next((t for t in outputs if t["name"] == name), None)
    if tensor is None:
        raise KeyError(name)
    shape = tensor["shape"]
    if not shape:
        return [[tensor]]
    rest = shape[1:]
    row = math.prod(rest)
    data = tensor["data"]
    return [[{"name": name, "datatype": tensor["datatype"], "shape": [1, *rest], "data": data[i * row:(i + 1) * row]}]
            for i in range(shape[0])]


def gather(task: str, instances: list[list[Tensor]]) -> list[Tensor]:
    """A sink's outputs over its instances (one per split item, in item order), joined along the first dimension.

    Named `<task>.<output>` in the system's response.
    """
    if len(instances) == 1:
        return [{**t, "name": f"{task}.{t['name']}"} for t in instances[0]]
    gathered = []
    for position, first in enumerate(instances[0]):
        parts = [outputs[position] for outputs in instances if position < len(outputs)]
        rest = first["shape"][1:]
        if len(parts) != len(instances) or any(p["shape"][1:] != rest or p["name"] != first["name"] for p in parts):
            raise BadResponse(f"output {first['name']!r} differs in name or shape between items")
        gathered.append({"name": f"{task}.{first['name']}", "datatype": first["datatype"],
                         "shape": [sum(p["shape"][0] if p["shape"] else 1 for p in parts), *rest],
                         "data": [x for p in parts for x in p["data"]]})
    return gathered
