"""The operator's own Prometheus metrics (prometheus-client), all of them, served by entry/process.py."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from tessera.planner.catalog import gpu_product
from tessera.planner.plan import Plan

RECONCILES = Counter("tessera_reconciles_total", "Reconciles run, by what triggered them.", ["kind"])
RECONCILE_ERRORS = Counter("tessera_reconcile_errors_total", "Reconciles that raised, by trigger.", ["kind"])
PLANS_STORED = Counter("tessera_plans_stored_total",
                       "Plans stored for a pool, one per change of its inputs (systems, nodes, options): its re-plans.",
                       ["pool"])
SOLVES_CANCELLED = Counter("tessera_solves_cancelled_total",
                           "Solves cancelled because their inputs changed (never two in a row).")
RECONCILE_SECONDS = Histogram("tessera_reconcile_seconds", "Wall time of one reconcile of all pools.",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
SOLVE_SECONDS = Histogram("tessera_solve_seconds", "Wall time of one solve, worker start-up included.", ["pool"],
                          buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300))
MIP_GAP = Gauge("tessera_mip_gap", "Relative MIP gap of the pool's current plan.", ["pool"])
GPUS_IN_POOL = Gauge("tessera_pool_gpus", "Schedulable GPUs in the pool.", ["pool"])
GPUS_PLANNED = Gauge("tessera_pool_gpus_planned", "GPUs the pool's plan uses.", ["pool"])
GPUS_IN_USE = Gauge("tessera_pool_gpus_in_use", "Planned GPUs whose MIG layout is applied.", ["pool"])
SLICES_IN_USE = Gauge("tessera_pool_slices_in_use", "Planned compute slices on GPUs whose MIG layout is applied.",
                      ["pool"])
SLICES_PLANNED = Gauge("tessera_pool_slices_planned", "Compute slices the pool's plan uses.", ["pool"])
WRITES = Counter("tessera_api_writes_total", "Writes to the Kubernetes API (the audit log is the judge).")
LOOP_LAG = Histogram("tessera_event_loop_lag_seconds", "How late the event loop woke a 50 ms timer.",
                     buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
LOOP_LAG_MAX = Gauge("tessera_event_loop_lag_max_seconds", "Largest event-loop stall seen since start.")

# demand read from Prometheus (demand/planning.py)
DEMAND_OBSERVED = Gauge("tessera_demand_observed_requests_per_second",
                        "Last demand read from Prometheus (absent: Unknown).", ["system"])
DEMAND_RECOMMENDED = Gauge("tessera_demand_recommended_requests_per_second",
                           "Demand the hysteresis would plan for (applied unless dry run).", ["system"])
DEMAND_PLANNED = Gauge("tessera_demand_planned_requests_per_second", "Demand the plan in force is made for.", ["system"])
DEMAND_DRY_RUN = Gauge("tessera_demand_dry_run", "1 while the system's recommendations are reported, not applied.",
                       ["system"])
DEMAND_RESOLVES = Counter("tessera_demand_resolves_total",
                          "Demand-only re-plans, by kind: replicas-only (variants and layouts fixed) or full.", ["kind"])
DEMAND_UNKNOWN_READINGS = Counter("tessera_demand_unknown_total", "Readings that gave no number, by reason.",
                                  ["system", "reason"])
MIG_CONFIGMAP_MISMATCH = Gauge("tessera_mig_configmap_mismatch",
                               "1 while the ClusterPolicy names another mig-parted ConfigMap than the one tessera is set to write.")
PREREQUISITE_MISSING = Gauge("tessera_prerequisite_missing",
                             "Missing prerequisites the preflight found, by reason (0: none; docs/operator.md).",
                             ["reason"])


def record_pool(pool: str, plan: Plan | None, pool_gpus: int, applied_layouts: list) -> None:
    """`applied_layouts`: the planned layouts (profile, count pairs) of GPUs whose node reported success."""
    GPUS_IN_POOL.labels(pool).set(pool_gpus)
    GPUS_IN_USE.labels(pool).set(len(applied_layouts))
    if plan is None:
        return
    product = gpu_product(plan.gpu)
    GPUS_PLANNED.labels(pool).set(plan.gpus_used)
    SLICES_PLANNED.labels(pool).set(sum(product.profile(i.mig_profile).compute_slices
                                        for g in plan.gpus for i in g.instances if i.config is not None))
    MIP_GAP.labels(pool).set(plan.solver.mip_gap)
    SLICES_IN_USE.labels(pool).set(sum(product.profile(name).compute_slices * count
                                       for layout in applied_layouts for name, count in layout))
