"""The planner's contract: one request in, one typed outcome out, plain picklable data.

The operator and the CLI both call `solve_request` (the operator through
`tessera.planner.worker`, in a worker process). Each outcome says what to do
next:

- `Planned`: a plan whose cost is proven (GPUs exactly, slices to the
  options' tolerance); apply it. A plan made apart (`solver.method`
  "decomposed", decompose.py) proves each system's own cost, not the
  whole's against the joint optimum, and carries no cost proof.
- `TimeLimit`: the time limit cut the proof short. With a plan, the plan
  is valid and checked, and `cost` says how far each count may be from its
  optimum; without one, retry (with more time).
- `Infeasible`: valid input that no plan serves in full, permanent until
  the input changes. `plan` is the best partial plan when one serves
  anything, `served` says how much of each system's demand the pool can
  serve, `diagnosis` what to change.
- `InvalidInput`: the input is wrong (permanent until the spec changes);
  `reason` names the field.
- `PlannerFailed`: a planner defect (a plan failed the independent
  checker) or the worker died (memory cap); never a plan.

Systems are keyed by `namespace/name`: the plan names systems by that key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tessera.planner.decompose import plan_pool
from tessera.planner.errors import InfeasibleError, PlannerBug, TimeLimitError
from tessera.planner.features import Features
from tessera.planner.model import Pool, SystemSpec
from tessera.planner.nodes import NodePool
from tessera.planner.plan import CostProof, Plan
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.profiles import ProfileStore
from tessera.planner.quota import InstanceQuota
from tessera.planner.solve import PlannerOptions, serve_stage


def system_key(namespace: str, name: str) -> str:
    """How the plan names a system: `namespace/name` (neither may contain '/' in Kubernetes)."""
    return f"{namespace}/{name}"


class SystemInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    spec: SystemSpec

    @property
    def key(self) -> str:
        return system_key(self.namespace, self.name)


class PlanRequest(BaseModel):
    """Everything one plan depends on."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    systems: list[SystemInput]
    pool: NodePool | Pool
    options: PlannerOptions = PlannerOptions()
    features: Features = Features()
    current: Plan | None = Field(default=None, description="The plan running now, keyed the same way.")
    measured: ProfileStore | None = Field(
        default=None, description="Measured profiles; the specs' given profiles and the estimate fill the rest.")
    quotas: list[InstanceQuota] = Field(
        default_factory=list, description="Caps on MIG instances per profile over systems' keys (ResourceQuotas).")
    running: dict[str, float] = Field(
        default_factory=dict, description="System key -> the served fraction the plan in force gives a running "
                                          "system this re-plan must not lower (plan()'s `running`).")


class ServedShare(BaseModel):
    demand_rps: float
    served_rps: float = Field(description="The most the pool serves of the demand (exact, never rounded).")


class Planned(BaseModel):
    kind: Literal["planned"] = "planned"
    plan: Plan


class TimeLimit(BaseModel):
    kind: Literal["time-limit"] = "time-limit"
    reason: str
    plan: Plan | None = Field(default=None, description="The best plan found, checked; None when none was.")
    gap: float | None = Field(default=None, description="Relative MIP gap of the plan's main stages.")
    cost: CostProof | None = Field(default=None, description="GPUs and slices beside their proven lower bounds.")

    @property
    def retryable(self) -> bool:
        return self.plan is None


class Infeasible(BaseModel):
    kind: Literal["infeasible"] = "infeasible"
    reason: str
    diagnosis: list[str] = Field(default_factory=list)
    served: dict[str, ServedShare] = Field(default_factory=dict, description="Per system key.")
    plan: Plan | None = Field(default=None, description="The plan serving as much as the pool can, if any.")


class InvalidInput(BaseModel):
    kind: Literal["invalid-input"] = "invalid-input"
    reason: str
    system: str | None = Field(default=None, description="The system whose spec the planner refused, when one is.")


class PlannerFailed(BaseModel):
    kind: Literal["planner-failed"] = "planner-failed"
    reason: str
    errors: list[str] = Field(default_factory=list, description="The checker's findings, when it refused a plan.")


Outcome = Annotated[Union[Planned, TimeLimit, Infeasible, InvalidInput, PlannerFailed], Field(discriminator="kind")]


def solve_request(request: PlanRequest) -> Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed:
    """Plan the request's systems on its pool, keyed by namespace/name; never raises for a planning answer."""
    invalid = _invalid(request)
    if invalid:
        return InvalidInput(reason=invalid)
    systems = [s.spec.model_copy(update={"name": s.key}) for s in request.systems]
    return plan_outcome(systems, request.pool, request.measured, request.features, request.options, request.current,
                        request.quotas, request.running)


def plan_outcome(systems: list[SystemSpec], pool: Pool | NodePool, measured: ProfileStore | None = None,
                 features: Features = Features(), options: PlannerOptions = PlannerOptions(),
                 current: Plan | None = None, quotas: Sequence[InstanceQuota] = (),
                 running: Mapping[str, float] = MappingProxyType({})
                 ) -> Planned | TimeLimit | Infeasible | InvalidInput | PlannerFailed:
    """plan() as an outcome: the profile store built from the specs (and `measured`), every answer typed."""
    try:
        store = build_profile_store(systems, pool.gpu, measured, options.batches, max_mps=options.max_mps)
        result = plan_pool(systems, pool, store, features, options, current, quotas, running)
    except InfeasibleError as error:
        return Infeasible(reason=str(error))
    except TimeLimitError as error:
        return TimeLimit(reason=str(error))
    except PlannerBug as error:
        return PlannerFailed(reason=str(error), errors=error.errors)
    except (ValueError, ValidationError) as error:  # profiles that cannot be had, a spec the planner refuses
        return InvalidInput(reason=str(error), system=getattr(error, "system", None))
    return outcome_of(result)


def outcome_of(result: Plan) -> Planned | TimeLimit | Infeasible:
    """What a plan that plan() returned means: proven, cut short, or serving only part."""
    report = result.solver
    if any(name == "cost" or serve_stage(name) for name in report.time_limited):
        cost = report.cost
        short = (f"GPUs {cost.gpus} (proven >= {cost.gpus_lower_bound}), slices {cost.slices} "
                 f"(proven >= {cost.slices_lower_bound})") if cost else f"gap {100 * report.mip_gap:.3g}%"
        return TimeLimit(reason=f"the time limit stopped {', '.join(report.time_limited)} before the proof: "
                                f"{short}", plan=result, gap=report.mip_gap, cost=cost)
    if not result.fully_served:
        served = {s.system: ServedShare(demand_rps=s.demand_rps, served_rps=s.served_rps) for s in result.systems}
        underserved = [key for key, share in served.items() if share.served_rps < share.demand_rps * (1 - 1e-5)]
        return Infeasible(reason=f"the pool cannot serve all demand of {', '.join(underserved)}",
                          diagnosis=result.diagnosis, served=served, plan=result if result.gpus_used else None)
    return Planned(plan=result)


def _invalid(request: PlanRequest) -> str | None:
    keys = [s.key for s in request.systems]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        return f"systems: repeated namespace/name {repeated}"
    if not request.systems:
        return "systems: no systems to plan"
    if "/" in "".join(s.namespace + s.name for s in request.systems):
        return "systems: a namespace or name contains '/'"
    return None
