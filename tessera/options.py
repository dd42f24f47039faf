"""Bounded command-line option types: every number finite and inside a stated range.

click's FloatRange lets `nan` through (every comparison with it is false) and
accepts `inf` when no maximum is given; these types refuse both and always
state the range, so that no option can ask for unbounded work.
"""

from __future__ import annotations

import math

import click

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
