"""The PNG of a run: demand and capacity, latency percentiles, violations over time, per system."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)

from tessera.planner.simulation.metrics import Series  # noqa: E402


def write_png(series: list[Series], dropping: list[Series], slo_ms: dict[str, float], path: str | Path,
              title: str) -> Path:
    """One column per system; rows: demand vs capacity, p50/p99 vs SLO, violations and drops (%).

    `series` is the run without early dropping, `dropping` the run with it.
    """
    path = Path(path)
    columns = max(len(series), 1)
    figure, axes = plt.subplots(3, columns, figsize=(5 * columns, 8), sharex=True, squeeze=False)
    for column, (one, dropped) in enumerate(zip(series, dropping)):
        demand, latency, violations = axes[:, column]
        demand.plot(one.start_s, one.demand_rps, label="demand")
        demand.axhline(one.capacity_rps, color="tab:green", linestyle="--", label="capacity")
        demand.set_title(one.system)
        demand.set_ylabel("source req/s")
        latency.plot(one.start_s, one.p50_ms, label="p50")
        latency.plot(one.start_s, one.p99_ms, label="p99")
        latency.axhline(slo_ms[one.system], color="tab:red", linestyle="--", label="SLO")
        latency.set_ylabel("end-to-end ms")
        latency.set_yscale("log")
        violations.plot(one.start_s, one.violation_pct, color="tab:red", label="late, no dropping")
        violations.plot(dropped.start_s, dropped.drop_pct, color="tab:gray", label="dropped (early dropping)")
        violations.set_ylabel("% of requests")
        violations.set_xlabel(f"time (s), {one.bin_s:g} s bins")
        for axis in (demand, latency, violations):
            axis.legend(fontsize=7, loc="upper right")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
