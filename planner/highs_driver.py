"""Drive HiGHS directly on a Pyomo model loaded once.

The model is written in Pyomo and handed to HiGHS once (load_model). The
stages of a lexicographic solve then change objectives, bounds, integrality
and rows in HiGHS itself: pyomo's appsi interface re-synchronises the whole
model on such changes, which took minutes for relax-and-fix on large pools.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
import pyomo.environ as pyo
from pyomo.common.tee import capture_output
from pyomo.common.numeric_types import native_numeric_types
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression
from pyomo.core.expr.visitor import identify_variables
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


@dataclass
class LoadedModel:
    """A Pyomo model in HiGHS: the solver, each variable's column (by id) and each constraint's row."""

    h: highspy.Highs
    variables: list[Any]
    column: dict[int, int]
    row: dict[Any, int]


class ModelLock:
    """One thread at a time builds, loads and reads Pyomo models: Pyomo's expression walkers are shared objects of
    its modules (identify_variables.visitor, evaluate_expression's), which two threads walking at once corrupt
    ("dictionary changed size during iteration", seen). Threads that solve parts at once (decompose.py) each hold
    it but while HiGHS runs (`released`, in HighsModel._run): one part's solve overlaps another's Python, which
    the GIL would serialize anyway. A thread that does not hold it (one plan at a time) runs as before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder = threading.local()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self._holder.holds = True
            try:
                yield
            finally:
                self._holder.holds = False

    @contextmanager
    def released(self) -> Iterator[None]:
        """Let the others model meanwhile, where this thread holds the lock."""
        if not getattr(self._holder, "holds", False):
            yield
            return
        self._holder.holds = False
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._holder.holds = True


MODELS = ModelLock()


class CollectorPause:
    """Python's cyclic garbage collector held off while a model is built and loaded, as long as any thread builds.

    A part's model is some 100,000 pyomo objects (variables, expressions, constraints) that live as long as the
    model, and building it allocates several times as many: the collector, started every 700 allocations, walks
    them again and again meanwhile and finds next to nothing to free (the expressions are freed by their reference
    counts). Held off, building and loading the 20 parts of bench/milp_build_speed.py took a quarter less CPU; the
    model is the same. The pause is counted, so threads building at once (parts solved at once) share it: the
    collector runs again when the last one is done, if it ran before the first began.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._building = 0
        self._was_enabled = False

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._building == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._building += 1
        try:
            yield
        finally:
            with self._lock:
                self._building -= 1
                if self._building == 0 and self._was_enabled:
                    gc.enable()


COLLECTOR = CollectorPause()


def quiet_highs() -> highspy.Highs:
    """A HiGHS instance that prints nothing: its constructor writes HiGHS's banner to file descriptor 1 (once per
    process), where it would precede `tessera plan --output json`'s document; captured as pyomo's appsi does."""
    with capture_output(capture_fd=True):
        h = highspy.Highs()  # type: ignore[no-untyped-call]  # highspy ships no annotations for its constructor
    h.setOptionValue("output_flag", False)
    return h


def load_model(model: pyo.ConcreteModel) -> LoadedModel:
    """The model's active constraints as HiGHS rows, in order, and as columns the variables they use, in the order
    they first appear: the model pyomo's appsi interface (set_instance) gives HiGHS, column for column and row for
    row (tests/planner/test_highs_driver.py compares them), in 0.4-0.5 of its CPU time (appsi also keeps, per
    variable and constraint, what a re-synchronisation would need): loading was about a fifth of a part's time
    (bench/decompose_phases.py).

    For the models the planner writes: linear, without a Pyomo objective (set_objective gives HiGHS its costs),
    mutable parameters or fixed variables (HighsModel.fix bounds columns); others are refused.
    """
    if next(model.component_data_objects(pyo.Objective, active=True), None) is not None:
        raise ValueError("a model for HighsModel sets its objective with set_objective, not as a Pyomo Objective")
    if any(p.mutable for p in model.component_objects(pyo.Param, descend_into=True)):
        raise ValueError("a model for HighsModel has no mutable parameters")
    if any(v.fixed for v in model.component_data_objects(pyo.Var, descend_into=True)):
        raise ValueError("a model for HighsModel has no fixed variables (fix() bounds their columns)")
    column: dict[int, int] = {}
    variables: list[Any] = []
    row: dict[Any, int] = {}
    lower: list[float] = []
    upper: list[float] = []
    starts: list[int] = []
    indices: list[int] = []
    values: list[float] = []
    for constraint in model.component_data_objects(pyo.Constraint, descend_into=True, active=True):
        low, body, high = constraint.to_bounded_expression(evaluate_bounds=True)
        found = _linear_row(body) or _any_row(body, constraint.name)
        # Columns in the order the variables first appear, a term of coefficient 0 included (a system without
        # demand): as appsi gives them; the standard representation leaves such terms out.
        for var in found.variables:
            if id(var) not in column:
                column[id(var)] = len(variables)
                variables.append(var)
        starts.append(len(values))
        indices += [column[id(var)] for var in found.terms]
        values += found.coefficients
        lower.append(-highspy.kHighsInf if low is None else low - found.constant)
        upper.append(highspy.kHighsInf if high is None else high - found.constant)
        row[constraint] = len(row)
    h = quiet_highs()
    bounds = [var.bounds for var in variables]
    h.addVars(len(variables), np.array([-highspy.kHighsInf if lb is None else lb for lb, _ in bounds], dtype=float),
              np.array([highspy.kHighsInf if ub is None else ub for _, ub in bounds], dtype=float))
    kinds = [highspy.HighsVarType.kContinuous if var.is_continuous() else highspy.HighsVarType.kInteger
             for var in variables]
    h.changeColsIntegrality(len(kinds), np.arange(len(kinds), dtype=np.int32), np.array(kinds, dtype=np.uint8))
    h.addRows(len(row), np.array(lower, dtype=float), np.array(upper, dtype=float), len(values),
              np.array(starts, dtype=np.int32), np.array(indices, dtype=np.int32), np.array(values, dtype=float))
    return LoadedModel(h, variables, column, row)


@dataclass
class Row:
    """A linear constraint's body: its variables in the order they first appear (identify_variables'), and the
    standard representation's terms (each variable once, coefficients summed, those of 0 left out) and constant."""

    variables: list[Any]
    terms: list[Any]
    coefficients: list[Any]
    constant: Any


def _linear_row(body: Any) -> Row | None:
    """The row read in one pass off the terms of a linear sum of numbers times variables (nearly every row the
    planner writes), summed as generate_standard_repn's loop for such a sum sums them; None for any other body.

    Before, each such row was walked for its variables' order and then by generate_standard_repn, which builds a
    representation object per row: one pass took load_model for the 20 parts of bench/milp_build_speed.py from
    0.75 to 0.67 CPU s (the collector held off in both).
    """
    if body.__class__ is not LinearExpression:
        return None
    coefficients: dict[int, Any] = {}
    by_id: dict[int, Any] = {}
    constant: Any = 0
    for term in body.args:
        if term.__class__ is MonomialTermExpression and term.args[0].__class__ in native_numeric_types:
            coefficient, var = term.args
        elif term.__class__ in native_numeric_types:
            constant += term
            continue
        elif term.is_variable_type():
            coefficient, var = 1, term
        else:
            return None
        key = id(var)
        if key in coefficients:
            coefficients[key] += coefficient
        else:
            coefficients[key] = coefficient
            by_id[key] = var
    kept = [key for key, coefficient in coefficients.items() if coefficient]
    return Row(list(by_id.values()), [by_id[key] for key in kept], [coefficients[key] for key in kept], constant)


def _any_row(body: Any, name: str) -> Row:
    """Any other linear body, through pyomo's visitor and standard representation."""
    repn = generate_standard_repn(body, quadratic=False, compute_values=True)
    if not repn.is_linear():
        raise ValueError(f"constraint {name} is not linear")
    return Row(list(identify_variables(body, include_fixed=False)), list(repn.linear_vars), list(repn.linear_coefs),
               repn.constant)


class HighsModel:
    def __init__(self, model: pyo.ConcreteModel, mip_gap: float) -> None:
        loaded = load_model(model)
        self.h: highspy.Highs = loaded.h
        self._column = loaded.column
        self._row = loaded.row
        self._vars = {id(v): v for v in loaded.variables}
        self.mip_gap = mip_gap
        self._configure()
        self._solution: SolutionCopy | None = None
        self.last_status = "not solved"

    def in_model(self, variables: Iterable[Any]) -> list[Any]:
        """Those of the variables HiGHS has a column for (load_model leaves out those no row uses)."""
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
        with MODELS.released():  # HiGHS lets go of the GIL: others may model meanwhile
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
