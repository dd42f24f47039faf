"""The bounded reader every input file goes through: both YAML loaders, quotes, size and text checks."""

from pathlib import Path

import pytest
import yaml

from tessera.planner import input_files
from tessera.planner.input_files import BoundedLoader, InputError, parse_yaml_documents, quote, read_text

from .corpus import alias_bomb, deep_block, deep_flow

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
LOADERS = sorted({BoundedLoader, input_files.LOADER}, key=lambda loader: loader.__name__)


@pytest.fixture(params=LOADERS, ids=lambda loader: loader.__name__)
def loader(request, monkeypatch):
    monkeypatch.setattr(input_files, "LOADER", request.param)
    return request.param


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_both_loaders_read_the_examples_as_pyyaml_does(loader, example):
    text = example.read_text()
    assert parse_yaml_documents(text, example.name) == list(yaml.safe_load_all(text))


@pytest.mark.parametrize("text, words", [
    (alias_bomb(), "more than 16 aliases"),
    (deep_block(200), "nested deeper than 24"),
    ("- " * 10_000 + "x", "nested deeper than 24"),
    (deep_flow(30), "nest"),
], ids=["alias-bomb", "deep-block", "deep-dash", "deep-flow"])
def test_both_loaders_refuse_bombs_and_deep_nesting_naming_the_file(loader, text, words):
    with pytest.raises(InputError, match=words) as error:
        parse_yaml_documents(text, "bomb.yaml")
    assert str(error.value).startswith("bomb.yaml: ")


def test_a_few_aliases_are_fine(loader):
    assert parse_yaml_documents("a: &x [1, 2]\nb: *x\n", "f") == [{"a": [1, 2], "b": [1, 2]}]


@pytest.mark.parametrize("text", ["a: .inf\n", "a: [1, -.inf]\n", "a: {b: .nan}\n"])
def test_non_finite_numbers_are_refused_with_their_field(loader, text):
    with pytest.raises(InputError, match=r"f: a.*not a finite number"):
        parse_yaml_documents(text, "f")


def test_quote_keeps_a_short_prefix_at_every_level():
    assert len(quote("x" * 10_000)) < 60
    nested = [["y" * 1000] * 1000] * 1000
    assert len(quote(nested)) < 200


def test_read_text_refuses_large_binary_and_non_utf8_files(tmp_path):
    large, binary, latin = tmp_path / "large", tmp_path / "binary", tmp_path / "latin"
    with large.open("wb") as handle:
        handle.truncate(10 * 1024 * 1024)
    binary.write_bytes(b"abc\0def")
    latin.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InputError, match="over the limit"):
        read_text(large)
    with pytest.raises(InputError, match="binary"):
        read_text(binary)
    with pytest.raises(InputError, match="not UTF-8"):
        read_text(latin)
