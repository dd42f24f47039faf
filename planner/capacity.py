"""The most demand a pool serves, per feature subset: the ablation of the method."""

from __future__ import annotations

from pydantic import BaseModel

from tessera.planner.features import Features, all_feature_sets
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import SolverReport
from tessera.planner.profiles import ProfileStore
from tessera.planner.solve import NoPlanError, PlannerOptions, max_common_scale


class CapacityRow(BaseModel):
    features: str
    scale: float
    max_demand_rps: dict[str, float]
    ratio_to_unopt: float | None = None
    ratio_to_a_plus_t: float | None = None
    solver: SolverReport | None = None
    error: str | None = None


class CapacityTable(BaseModel):
    gpu: str
    gpus: int
    rows: list[CapacityRow]

    def ratio(self, features: str, baseline: str) -> float | None:
        rows = {row.features: row for row in self.rows}
        if baseline not in rows or features not in rows or rows[baseline].scale <= 0:
            return None
        return rows[features].scale / rows[baseline].scale


def capacity(
    systems: list[SystemSpec],
    pool: Pool,
    store: ProfileStore,
    feature_sets: list[Features] | None = None,
    options: PlannerOptions = PlannerOptions(),
    progress=None,
) -> CapacityTable:
    """For each feature subset, the largest common multiple of every system's demand the pool serves."""
    rows = []
    for features in feature_sets or all_feature_sets():
        try:
            scale, report = max_common_scale(systems, pool, store, features, options)
            rows.append(CapacityRow(features=features.label, scale=scale + 0.0, solver=report,
                                    max_demand_rps={s.name: scale * s.demand_rps for s in systems}))
        except NoPlanError as error:
            rows.append(CapacityRow(features=features.label, scale=0.0, error=str(error),
                                    max_demand_rps={s.name: 0.0 for s in systems}))
        if progress:
            progress(features)
    table = CapacityTable(gpu=pool.gpu, gpus=pool.gpus, rows=rows)
    for row in rows:
        row.ratio_to_unopt = table.ratio(row.features, "Unopt")
        row.ratio_to_a_plus_t = table.ratio(row.features, "A+T")
    return table
