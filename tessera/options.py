"""Bounded command-line option types: every number finite and inside a stated range.

click's FloatRange lets `nan` through (every comparison with it is false) and
accepts `inf` when no maximum is given; these types refuse both and always
state the range, so that no option can ask for unbounded work.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import annotated_types
import click
from pydantic import BaseModel

from tessera.planner.input_files import shorten


class FiniteFloat(click.FloatRange):
    """A finite float in [min, max]."""

    name = "finite float"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and len(value) > 64:
            self.fail(f"{shorten(value)} is not a number", param, ctx)
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number; expected {self._describe_range()}", param, ctx)
        return super().convert(number, param, ctx)


class BoundedInt(click.IntRange):
    """An integer in [min, max], refused before Python parses a thousand-digit number."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and len(value) > 24:
            self.fail(f"{shorten(value)} is not an integer in {self._describe_range()}", param, ctx)
        return super().convert(value, param, ctx)


class OutputFile(click.Path):
    """A file to write: refused before any work when its folder does not exist or it is a folder."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, writable=True, path_type=Path)

    def convert(self, value, param, ctx):
        path = super().convert(value, param, ctx)
        if not path.parent.is_dir():
            self.fail(f"{shorten(str(path))}: its folder {shorten(str(path.parent))} does not exist", param, ctx)
        return path


SEED = BoundedInt(0, 2**32 - 1)  # what numpy's generators take: a negative seed is their ValueError
WORKERS = BoundedInt(1, 64)  # processes running simulations; each holds the twin and a workload


def field_range(model: type[BaseModel], name: str) -> click.ParamType:
    """The option type of a settings field: its bounds are the field's (ge/gt/le/lt), so flag and model agree."""
    field = model.model_fields[name]
    bounds: dict[str, Any] = {}
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            bounds["min"] = rule.ge
        elif isinstance(rule, annotated_types.Gt):
            bounds.update(min=rule.gt, min_open=True)
        elif isinstance(rule, annotated_types.Le):
            bounds["max"] = rule.le
        elif isinstance(rule, annotated_types.Lt):
            bounds.update(max=rule.lt, max_open=True)
    if field.annotation is int:
        return BoundedInt(**bounds)
    if field.annotation is float:
        return FiniteFloat(**bounds)
    raise TypeError(f"{model.__name__}.{name} is not a number")
