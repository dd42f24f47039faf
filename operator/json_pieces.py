"""JSON decoded a piece at a time, so that decoding a large list lets other threads run.

`json.loads` is one C call that holds the GIL until the whole document is
decoded: for the API server's list of 100 GPU nodes (about 460 KB) that
was 4-26 ms during which the event loop, in another thread, could not run.
Here a top-level object's arrays (a list's `items`) are decoded one
element at a time; between elements the interpreter can hand the GIL to the
event loop. The result equals `json.loads`'s.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def loads_in_pieces(document: str | bytes) -> Any:
    """What `json.loads(document)` returns; a top-level object's array values decoded element by element."""
    text = document.decode("utf-8") if isinstance(document, bytes) else document
    start = _skip(text, 0)
    if not text.startswith("{", start):
        return json.loads(text)
    decoded, end = _object(text, start)
    if _skip(text, end) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, end))
    return decoded


def _skip(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    return found.end() if found else at


def _object(text: str, at: int) -> tuple[dict[str, Any], int]:
    decoded: dict[str, Any] = {}
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        return decoded, at + 1
    while True:
        if not text.startswith('"', at):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if not text.startswith(":", at):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
        at = _skip(text, at + 1)
        decoded[key], at = _array(text, at) if text.startswith("[", at) else _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text.startswith("}", at):
            return decoded, at + 1
        if not text.startswith(",", at):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)


def _array(text: str, at: int) -> tuple[list[Any], int]:
    elements: list[Any] = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return elements, at + 1
    while True:
        element, at = _DECODER.raw_decode(text, at)
        elements.append(element)
        at = _skip(text, at)
        if text.startswith("]", at):
            return elements, at + 1
        if not text.startswith(",", at):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)
