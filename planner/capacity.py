"""The most demand a pool serves, per feature subset: the ablation of the method."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from tessera.planner.features import Features, all_feature_sets
from tessera.planner.input_files import InputError, quote
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.plan import SolverReport
from tessera.planner.profiles import ProfileStore
from tessera.planner.solve import NoPlanError, PlannerOptions, max_common_scale


class CapacityRow(BaseModel):
    features: str
    scale: float = Field(description="Common factor on every servable system's demand.")
    max_demand_rps: dict[str, float]
    total_rps: float
    unservable: list[str] = Field(default_factory=list,
                                  description="Systems that cannot meet their SLOs at all with these features.")
    ratio_to_unopt: float | None = None
    ratio_to_a_plus_t: float | None = None
    solver: SolverReport | None = None
    error: str | None = None


class CapacityTable(BaseModel):
    gpu: str
    gpus: int
    rows: list[CapacityRow]

    def ratio(self, features: str, baseline: str) -> float | None:
        """Total demand served with `features` over that of `baseline`."""
        rows = {row.features: row for row in self.rows}
        if baseline not in rows or features not in rows or rows[baseline].total_rps <= 0:
            return None
        return rows[features].total_rps / rows[baseline].total_rps


def _row(systems: list[SystemSpec], servable: list[SystemSpec], pool: Pool, store: ProfileStore, features: Features,
         options: PlannerOptions) -> CapacityRow:
    scale, report = max_common_scale(servable, pool, store, features, options)
    scale = scale if scale > 0 else 0.0  # max(-0.0, 0.0) is -0.0, which printed as a capacity
    demand = {s.name: (scale * s.demand_rps if s in servable else 0.0) for s in systems}
    return CapacityRow(features=features.label, scale=scale, max_demand_rps=demand, total_rps=sum(demand.values()),
                       unservable=[s.name for s in systems if s not in servable], solver=report)


def _servable_alone(system: SystemSpec, pool: Pool, store: ProfileStore, features: Features,
                    options: PlannerOptions) -> bool:
    try:
        scale, _ = max_common_scale([system], pool, store, features, options)
    except NoPlanError:
        return False
    return scale > 1e-9


def _capacity_row(systems: list[SystemSpec], pool: Pool, store: ProfileStore, features: Features,
                  options: PlannerOptions) -> CapacityRow:
    """The common scale of all systems; when that is zero, of those that can be served at all."""
    try:
        row = _row(systems, systems, pool, store, features, options)
        if row.scale > 1e-9:
            return row
        # One system that serves nothing is out of reach: say so rather than print 0 as its capacity.
        servable = [] if len(systems) == 1 else [
            s for s in systems if _servable_alone(s, pool, store, features, options)]
        return _row(systems, servable, pool, store, features, options) if servable else row.model_copy(
            update={"unservable": [s.name for s in systems]})
    except NoPlanError as error:
        return CapacityRow(features=features.label, scale=0.0, error=str(error), total_rps=0.0,
                           max_demand_rps={s.name: 0.0 for s in systems})


def capacity(
    systems: list[SystemSpec],
    pool: Pool,
    store: ProfileStore,
    feature_sets: list[Features] | None = None,
    options: PlannerOptions = PlannerOptions(),
    progress: Callable[[Features], object] | None = None,
) -> CapacityTable:
    """For each feature subset, the largest common multiple of every system's demand the pool serves.

    A system that no demand can be served for under a subset (its SLOs are
    out of reach, say without task budgeting) is reported as such and left
    out of that subset's common scale; ratios compare total demand served.

    A system whose demand is zero is refused (``InputError`` naming the
    field): its share of the common scale is zero whatever the pool, so any
    figure printed for it would be no capacity at all.
    """
    for system in systems:
        if system.demand_rps <= 0:
            raise InputError(
                f"system {quote(system.name)}: spec.demandRequestsPerSecond: {system.demand_rps:g} req/s; capacity "
                f"scales every system's demand by one common factor, so each needs a demand above 0 (its share of "
                f"the load; for a system alone any value gives the same capacity)", system=system.name)
    rows = []
    for features in feature_sets or all_feature_sets():
        rows.append(_capacity_row(systems, pool, store, features, options))
        if progress:
            progress(features)
    table = CapacityTable(gpu=pool.gpu, gpus=pool.gpus, rows=rows)
    for row in rows:
        row.ratio_to_unopt = table.ratio(row.features, "Unopt")
        row.ratio_to_a_plus_t = table.ratio(row.features, "A+T")
    return table
