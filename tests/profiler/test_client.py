"""The profiler's requests: the model's input from its metadata, JSON or binary tensors of b rows."""

import json

import pytest

from tessera.profiler.client import BINARY_HEADER, InputSpec

IMAGE = {"name": "resnet", "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, 3, 224, 224]}]}


def test_the_input_comes_from_the_metadata_without_its_batch_dimension():
    assert InputSpec.from_metadata(IMAGE) == InputSpec(name="pixels", datatype="FP32", row_shape=(3, 224, 224))


def test_a_model_that_publishes_no_inputs_gets_one_value_per_row():
    assert InputSpec.from_metadata({"name": "m"}).row_shape == (1,)


def test_a_non_numeric_input_is_refused_with_its_name():
    with pytest.raises(ValueError, match="'text'.*BYTES"):
        InputSpec.from_metadata({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}]})


def test_a_json_request_carries_b_rows_of_zeros():
    body, headers = InputSpec(name="x", datatype="INT64", row_shape=(2, 3)).request(4)
    tensor = json.loads(body)["inputs"][0]
    assert tensor["shape"] == [4, 2, 3] and tensor["data"] == [0] * 24
    assert headers["Content-Type"] == "application/json"


def test_a_binary_request_follows_the_binary_tensor_extension():
    body, headers = InputSpec.from_metadata(IMAGE).request(8, binary=True)
    header_length = int(headers[BINARY_HEADER])
    tensor = json.loads(body[:header_length])["inputs"][0]
    size = 8 * 3 * 224 * 224 * 4
    assert tensor["shape"] == [8, 3, 224, 224] and tensor["parameters"] == {"binary_data_size": size}
    assert "data" not in tensor and body[header_length:] == bytes(size)
