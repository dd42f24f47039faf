"""Drive HiGHS directly on a Pyomo model loaded once.

The model is written in Pyomo and handed to HiGHS through Pyomo's appsi
interface once. The stages of a lexicographic solve then change objectives,
bounds, integrality and rows in HiGHS itself: appsi re-synchronises the whole
model on such changes, which took minutes for relax-and-fix on large pools.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
import pyomo.environ as pyo
from pyomo.contrib.appsi.solvers import Highs as AppsiHighs
from pyomo.repn import generate_standard_repn

_FEASIBLE_SOLUTION = 2  # HiGHS's kSolutionStatusFeasible
PROBING = 1 << 15  # HiGHS's presolve rule bit for probing
_DEFAULT_ABS_GAP = 1e-6  # HiGHS's own default


@dataclass
class SolutionCopy:
    """Column values copied out of HiGHS, which may reuse its own buffers."""

    col_value: list[float]

    def as_highs(self) -> highspy.HighsSolution:
        solution = highspy.HighsSolution()
        solution.col_value = self.col_value
        solution.value_valid = True
        return solution


@dataclass
class SolveResult:
    status: str
    value: float
    bound: float
    seconds: float


class HighsModel:
    def __init__(self, model: pyo.ConcreteModel, mip_gap: float) -> None:
        loader = AppsiHighs()
        loader.config.load_solution = False
        loader.set_instance(model)
        self.h: highspy.Highs = loader._solver_model
        self._column = dict(loader._pyomo_var_to_solver_var_map)
        self._row = dict(loader._pyomo_con_to_solver_con_map)
        self._vars = {id(v): v for v in model.component_data_objects(pyo.Var, descend_into=True)}
        self.mip_gap = mip_gap
        self._configure()
        self._solution: SolutionCopy | None = None
        self.last_status = "not solved"

    def in_model(self, variables: Iterable[Any]) -> list[Any]:
        """Those of the variables HiGHS has a column for (appsi leaves out those no row or objective uses)."""
        return [v for v in variables if id(v) in self._column]

    def columns(self, variables: Iterable[Any]) -> np.ndarray:
        return np.array([self._column[id(v)] for v in variables], dtype=np.int32)

    def _linear(self, expression: Any) -> tuple[np.ndarray, np.ndarray, float]:
        repn = generate_standard_repn(expression, compute_values=True, quadratic=False)
        if not repn.is_linear():
            raise ValueError("objective and held expressions must be linear")
        columns = self.columns(repn.linear_vars)
        return columns, np.array(repn.linear_coefs, dtype=float), float(repn.constant)

    def set_objective(self, expression: Any, sense: Any) -> None:
        count = self.h.getNumCol()
        self.h.changeColsCost(count, np.arange(count, dtype=np.int32), np.zeros(count))
        columns, coefficients, constant = self._linear(expression)
        totals: dict[int, float] = {}
        for column, coefficient in zip(columns, coefficients):
            totals[int(column)] = totals.get(int(column), 0.0) + coefficient
        indices = np.array(list(totals), dtype=np.int32)
        self.h.changeColsCost(len(indices), indices, np.array(list(totals.values())))
        self.h.changeObjectiveOffset(constant)
        self.h.changeObjectiveSense(
            highspy.ObjSense.kMinimize if sense == pyo.minimize else highspy.ObjSense.kMaximize)

    def add_row(self, expression: Any, lower: float, upper: float) -> None:
        columns, coefficients, constant = self._linear(expression)
        self.h.addRow(lower - constant, upper - constant, len(columns), columns, coefficients)

    def relax_rows(self, constraints: Iterable[Any]) -> None:
        for constraint in constraints:
            self.h.changeRowBounds(self._row[constraint], -highspy.kHighsInf, highspy.kHighsInf)

    def set_bounds(self, variables: Iterable[Any], lower: float, upper: float) -> None:
        columns = self.columns(variables)
        self.h.changeColsBounds(len(columns), columns, np.full(len(columns), lower), np.full(len(columns), upper))

    def fix(self, variables: Iterable[Any], value: float) -> None:
        """Bound the variables to `value`, in the solution the next solve starts from too: a start a hair off
        the new bounds is still within HiGHS's tolerances, and would be kept as it is."""
        variables = list(variables)
        self.set_bounds(variables, value, value)
        if self._solution is not None:
            for column in self.columns(variables):
                self._solution.col_value[column] = value

    def restore_bounds(self, variables: Iterable[Any]) -> None:
        for var in variables:
            lower, upper = var.bounds
            self.h.changeColBounds(self._column[id(var)], -highspy.kHighsInf if lower is None else lower,
                                   highspy.kHighsInf if upper is None else upper)

    def set_integral(self, variables: Iterable[Any], integral: bool) -> None:
        columns = self.columns(variables)
        kind = highspy.HighsVarType.kInteger if integral else highspy.HighsVarType.kContinuous
        self.h.changeColsIntegrality(len(columns), columns, np.full(len(columns), kind, dtype=np.uint8))

    def solve(self, time_limit_s: float, neighbourhood_search: bool = True,
              abs_gap: float | None = None) -> SolveResult | None:
        """Solve from the last solution, if any; ``neighbourhood_search`` runs HiGHS's
        RINS and RENS heuristics (sub-MIPs around the root LP solution).

        With ``abs_gap`` the solve stops once the objective is within that
        many units of its bound, whatever the relative gap (a count proven in
        its own units); otherwise at the relative gap the model was made with.
        """
        started = time.perf_counter()
        warm = self._solution is not None
        self.h.setOptionValue("mip_heuristic_run_rins", neighbourhood_search)
        self.h.setOptionValue("mip_heuristic_run_rens", neighbourhood_search)
        self.h.setOptionValue("mip_rel_gap", self.mip_gap if abs_gap is None else 0.0)
        self.h.setOptionValue("mip_abs_gap", _DEFAULT_ABS_GAP if abs_gap is None else abs_gap)
        found = self._run(time_limit_s, warm_start=warm)
        if warm and (found is None or not self._agrees(found)):
            # Seen with HiGHS 1.16 after a warm start: a solve that presolve
            # finishes reports its own objective but returns the start; others
            # end in "Solve error": presolve reduces the model to nothing and
            # postsolve leaves violations. The same model solved cold without
            # presolve is right.
            self.h.clearSolver()
            self.h.setOptionValue("presolve", "off")
            found = self._run(time_limit_s, warm_start=False)
            self.h.setOptionValue("presolve", "choose")
        seconds = time.perf_counter() - started
        if found is None:
            return None
        self._solution = found
        info = self.h.getInfo()
        value = info.objective_function_value
        # A MIP stopped before its first bound reports an infinite one: keep it
        # so, or the gap of an unproven solution would read as zero.
        bound = info.mip_dual_bound if info.mip_node_count >= 0 else value
        status = self.h.modelStatusToString(self.h.getModelStatus())
        return SolveResult(status, value, bound, seconds)

    def _configure(self) -> None:
        self.h.setOptionValue("output_flag", False)
        self.h.setOptionValue("mip_rel_gap", self.mip_gap)
        # Probing the many 0/1 instance counts took all of a solve's time in
        # presolve on pools of a few GPUs, for no reduction worth it.
        self.h.setOptionValue("presolve_rule_off", PROBING)

    def _run(self, time_limit_s: float, warm_start: bool) -> SolutionCopy | None:
        self.h.setOptionValue("time_limit", max(time_limit_s, 0.5))
        if warm_start:
            self.h.setSolution(self._found().as_highs())
        self.h.run()
        self.last_status = self.h.modelStatusToString(self.h.getModelStatus())
        if self.h.getInfo().primal_solution_status != _FEASIBLE_SOLUTION:
            return None
        solution = self.h.getSolution()
        return SolutionCopy(list(solution.col_value))

    def _agrees(self, solution: "SolutionCopy") -> bool:
        lp = self.h.getLp()
        recomputed = float(np.dot(lp.col_cost_, solution.col_value)) + lp.offset_
        reported = self.h.getInfo().objective_function_value
        return abs(recomputed - reported) <= 1e-6 * max(1.0, abs(reported))

    def _found(self) -> SolutionCopy:
        """The last solution a solve found; a caller asking before any is a bug in the caller."""
        if self._solution is None:
            raise RuntimeError("no solve has found a solution yet")
        return self._solution

    def last_solution(self) -> SolutionCopy:
        return self._found()

    def start_from(self, solution: SolutionCopy) -> None:
        """The next solve starts from this earlier solution (feasible for it) instead of the last one."""
        self._solution = solution

    def load_into_model(self) -> None:
        values = self._found().col_value
        for var_id, column in self._column.items():
            self._vars[var_id].set_value(values[column], skip_validation=True)

    def value(self, variable: Any) -> float:
        return self._found().col_value[self._column[id(variable)]]
