"""Why the planner returns no plan: one exception type per kind of answer.

The contract (contract.py) turns these into typed outcomes; the CLI into
exit codes. An invariant that breaks is a PlannerBug, never a plan.
"""

from __future__ import annotations


class NoPlanError(ValueError):
    """No plan is returned; the subclasses say whether retrying can help."""


class InfeasibleError(NoPlanError):
    """The input admits no plan at all, not even serving part of the demand: permanent until it changes."""


class TimeLimitError(NoPlanError):
    """The time limit ran out before any plan was found: retrying with more time may help."""


class PlannerBug(RuntimeError):
    """An invariant of the planner broke (a plan failed the independent checker, replicas found no
    instance): a defect to report, never a plan to apply."""

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = list(errors or [])

    def __reduce__(self) -> tuple[type[PlannerBug], tuple[str, list[str]]]:
        return type(self), (self.args[0], self.errors)
