"""Feature switches of the JigsawServe ablation: A, S and T.

A (accuracy scaling): tasks may run less accurate variants than their best.
S (spatial partitioning): MIG instances and MPS sharing; without it every
  replica takes a whole GPU.
T (task-graph budgeting): per-task latency budgets chosen per path; without
  it every task gets an equal share of the SLO.
"""

from __future__ import annotations

from itertools import combinations

from pydantic import BaseModel, ConfigDict

from tessera.planner.input_files import quote

LETTERS = {"A": "accuracy_scaling", "S": "spatial_partitioning", "T": "task_budgeting"}


class Features(BaseModel):
    model_config = ConfigDict(frozen=True)

    accuracy_scaling: bool = True
    spatial_partitioning: bool = True
    task_budgeting: bool = True

    @classmethod
    def parse(cls, text: str) -> "Features":
        """`A+S+T`, `S+T`, `A`, ... or `unopt` (none of them)."""
        cleaned = text.strip().upper()
        if cleaned in ("UNOPT", "NONE", ""):
            return cls(accuracy_scaling=False, spatial_partitioning=False, task_budgeting=False)
        letters = [part.strip() for part in cleaned.replace(",", "+").split("+")]
        unknown = [letter for letter in letters if letter not in LETTERS]
        if unknown:
            raise ValueError(f"unknown feature {quote(unknown[0])} in {quote(text)}: use A, S, T joined by '+', or 'unopt'")
        return cls(**{field: letter in letters for letter, field in LETTERS.items()})

    @property
    def label(self) -> str:
        on = [letter for letter, field in LETTERS.items() if getattr(self, field)]
        return "+".join(on) if on else "Unopt"


def all_feature_sets() -> list[Features]:
    """Unopt, A, S, T, A+S, A+T, S+T, A+S+T: the paper's ablation order."""
    letters = list(LETTERS)
    return [
        Features.parse("+".join(chosen) or "unopt")
        for size in range(len(letters) + 1)
        for chosen in combinations(letters, size)
    ]
