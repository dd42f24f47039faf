"""Reading what users write, within bounds: every input file of tessera goes through here.

A hostile or broken file must cost little and say clearly what is wrong:

- a size limit, checked before reading (a 50 MB file is refused unread);
- text only: UTF-8 without NUL bytes (binary files are refused);
- YAML read by a loader that refuses more than a few aliases (an alias bomb
  expands exponentially as soon as anything walks or prints it) and deep
  nesting (flow `[[[[...`, block `- - - -` and indentation alike, refused
  while scanning, before any recursion);
- every number finite: `.inf`, `.nan` and `1e999` are refused with the path
  of the field;
- messages quote at most a short prefix of a value (`quote`).

`InputError` is the one exception for all of it: its message names the file,
the field and what was expected, in one to a few lines.
"""

from __future__ import annotations

import csv
import io
import math
import reprlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import Node
from yaml.resolver import Resolver
from yaml.tokens import Token

API_VERSION = "tessera.ai/v1alpha1"
MAX_YAML_BYTES = 256 * 1024
MAX_CSV_BYTES = 4 * 1024 * 1024
MAX_CSV_ROWS = 100_000
MAX_ALIASES = 16
MAX_DEPTH = 24
MAX_QUOTE = 40
MAX_ERRORS_SHOWN = 4

Model = TypeVar("Model", bound=BaseModel)


class InputError(ValueError):
    """Input tessera refuses; the message names the file, the field and what was expected.

    Errors found past loading (in the planner) know the system, not the file:
    `system` names it so that the caller can say which file it came from.
    """

    def __init__(self, message: str, system: str | None = None) -> None:
        super().__init__(message)
        self.system = system


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxstring = short.maxother = MAX_QUOTE
    short.maxlevel = 2
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 4
    return short


_SHORT = _short_repr()


def quote(value: Any) -> str:
    """A value as messages show it: its repr, cut at every level (so a bomb is never walked) and in all."""
    text = _SHORT.repr(value)
    return text if len(text) <= 2 * MAX_QUOTE else text[:2 * MAX_QUOTE] + "..."


def shorten(text: Any) -> str:
    """Text (a name, say) cut to a short prefix, without quotes."""
    shown = str(text) if isinstance(text, (str, int, float)) else quote(text)
    return shown if len(shown) <= MAX_QUOTE else shown[:MAX_QUOTE] + "..."


def field_path(location: Sequence[Any]) -> str:
    """`tasks[0].variants[1].accuracy` from a pydantic location; long keys are cut."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = shorten(part)
            text += f".{name}" if text else name
    return text


def describe(error: ValidationError, prefix: str = "") -> str:
    """Pydantic's errors, one per line (the first few): `field: what was expected`."""
    errors = error.errors(include_url=False, include_input=False)
    lines = []
    for item in errors[:MAX_ERRORS_SHOWN]:
        where = field_path([*([prefix] if prefix else []), *item["loc"]]) or "(top level)"
        message = item["msg"]
        message = message if len(message) <= 200 else message[:200] + "..."
        lines.append(f"{where}: {message}")
    if len(errors) > MAX_ERRORS_SHOWN:
        lines.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors")
    return "\n  ".join(lines)


def validate(model: type[Model], data: Any, where: str, prefix: str = "",
             error_type: type[InputError] = InputError, **options: Any) -> Model:
    """`model` from `data` (`options` go to model_validate), or an InputError naming `where` and every failing field."""
    try:
        return model.model_validate(data, **options)
    except ValidationError as error:
        raise error_type(f"{where}: {describe(error, prefix)}") from None


def object_name_and_spec(document: dict[str, Any], kind: str, where: str,
                         error_type: type[InputError] = InputError) -> tuple[str, dict[str, Any]]:
    """metadata.name and spec of a tessera object of `kind`, or an error naming the field that is wrong."""
    if document.get("kind") != kind:
        raise error_type(f"{where}: kind must be {kind}, got {quote(document.get('kind'))}")
    if document.get("apiVersion") != API_VERSION:
        raise error_type(f"{where}: apiVersion must be {API_VERSION}, got {quote(document.get('apiVersion'))}")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not name or not isinstance(name, str):
        raise error_type(f"{where}: metadata.name: expected a name (a string), got {quote(name)}")
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise error_type(f"{where} ({shorten(name)}): spec: expected a mapping, got {type(spec).__name__}")
    return name, spec


def read_text(path: str | Path, max_bytes: int = MAX_YAML_BYTES) -> str:
    """A file's text, refused when larger than `max_bytes`, not UTF-8, or binary."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(f"{path}: {size} bytes, over the limit of {max_bytes} bytes for this kind of file")
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror or error}") from None
    if len(data) > max_bytes:  # a file that grew, or a device: stat said nothing useful
        raise InputError(f"{path}: over the limit of {max_bytes} bytes for this kind of file")
    if b"\0" in data:
        raise InputError(f"{path}: a binary file (NUL bytes); expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start}); expected UTF-8 text") from None


class _Refused(yaml.YAMLError):
    pass


class _Limits(Composer):
    """Composer hooks: refuse the (n+1)-th alias and nesting deeper than the limit, before recursing."""

    _aliases = 0
    _depth = 0
    check_event: Callable[..., bool]  # the parser's (PyYAML's Parser or libyaml's CParser), later in the MRO

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} aliases (*name); write the values out")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class BoundedLoader(_Limits, yaml.SafeLoader):
    """PyYAML's safe loader with the limits; nesting is also refused while scanning, before any token piles up."""

    def fetch_flow_collection_start(self, token_class: type[Token]) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels (line {self.line + 1})")
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels (line {self.line + 1})")
        return super().add_indent(column)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _CBoundedLoader(_Limits, Composer, CParser, SafeConstructor, Resolver):
        """libyaml's parser (seven times faster; it refuses flow nesting past 1000 itself) under the same
        Python composer hooks: Composer comes before CParser so that nodes are composed here, not in C."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    LOADER: type[_Limits] = _CBoundedLoader
else:  # pragma: no cover - PyYAML wheels ship libyaml
    LOADER = BoundedLoader


def parse_yaml_documents(text: str, where: str) -> list[Any]:
    """Every document of a YAML text, each with only finite numbers."""
    try:
        documents = list(yaml.load_all(text, Loader=LOADER))  # type: ignore[arg-type]  # stubs list PyYAML's own loaders only
    except _Refused as error:
        raise InputError(f"{where}: refused: {error}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{where}: not valid YAML: {_yaml_problem(error)}") from None
    except (ValueError, OverflowError, RecursionError) as error:  # a timestamp or number YAML cannot build
        raise InputError(f"{where}: not valid YAML: {str(error)[:200]}") from None
    for index, document in enumerate(documents, start=1):
        require_finite(document, f"{where}, document {index}" if len(documents) > 1 else where)
    return documents


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark
        place = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{error.problem or error.context}{place}"[:200]
    return str(error)[:200]


def load_yaml_documents(path: str | Path, max_bytes: int = MAX_YAML_BYTES) -> list[Any]:
    """Every document of a YAML file, read within the limits above."""
    return parse_yaml_documents(read_text(path, max_bytes), str(path))


def load_yaml(path: str | Path, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """The one document of a YAML file (None when empty)."""
    documents = load_yaml_documents(path, max_bytes)
    if len(documents) > 1:
        raise InputError(f"{path}: {len(documents)} YAML documents; expected one")
    return documents[0] if documents else None


def require_finite(data: Any, where: str, location: tuple[Any, ...] = ()) -> None:
    """Refuse NaN and infinite numbers anywhere in parsed data, naming the field."""
    if isinstance(data, float) and not math.isfinite(data):
        raise InputError(f"{where}: {field_path(location) or 'value'}: {data} is not a finite number")
    if isinstance(data, dict):
        for key, value in data.items():
            require_finite(value, where, (*location, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            require_finite(value, where, (*location, index))


def csv_records(path: str | Path, required: tuple[str, ...], exact: bool = False,
                ) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, record) of a CSV file within the size and row limits, its header checked for `required`."""
    text = read_text(path, MAX_CSV_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as error:
        raise InputError(f"{path}: not a CSV file: {error}") from None
    reader.fieldnames = header
    missing = [c for c in required if c not in header]
    if missing or (exact and tuple(header) != required):
        raise InputError(f"{path}: header {quote(','.join(header))}; expected the columns {','.join(required)}")
    try:
        for index, record in enumerate(reader):
            if index >= MAX_CSV_ROWS:
                raise InputError(f"{path}: more than {MAX_CSV_ROWS} rows")
            if None in record:
                raise InputError(f"{path}:{reader.line_num}: more cells than the header has columns")
            yield reader.line_num, record
    except csv.Error as error:
        raise InputError(f"{path}:{reader.line_num}: not a CSV row: {error}") from None
