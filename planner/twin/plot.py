"""Timeline PNG of a twin run: running, waiting and KV usage over time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .sim import STARVATION_RATIO, TwinResult

if TYPE_CHECKING:
    from .validate import ScoredRun


def timeline_png(res: TwinResult, path: str | Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(3, 1, figsize=(9, 6), sharex=True)
    ax[0].plot(res.ts_t, res.ts_running, lw=1)
    ax[0].set_ylabel("running")
    ax[1].plot(res.ts_t, res.ts_waiting, lw=1, color="tab:orange")
    ax[1].set_ylabel("waiting")
    ax[2].plot(res.ts_t, res.ts_kv, lw=1, color="tab:green")
    ax[2].set_ylabel("KV usage")
    ax[2].set_ylim(0, 1.05)
    ax[2].set_xlabel("time (s)")
    ax[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def validation_png(rows: list[ScoredRun], path: str | Path, threshold: float = STARVATION_RATIO) -> None:
    """Real vs twin on the judged halves: throughput beside the original twin, and the
    throughput / offered ratio whose quadrants around the starvation rule show starvation agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    real = np.array([r.real_throughput for r in rows])
    fig, ax = plt.subplots(1, 2, figsize=(11, 5))
    lim = (real.min() * 0.8, real.max() * 1.25)
    ax[0].plot(lim, lim, color="grey", lw=0.8)
    ax[0].scatter(real, [r.dt_throughput for r in rows], s=14, marker="x", color="tab:grey", label="original twin (dt_*)")
    for rank, color in ((16, "tab:blue"), (32, "tab:orange")):
        sel = [r for r in rows if r.max_rank == rank]
        ax[0].scatter([r.real_throughput for r in sel], [r.twin_throughput for r in sel], s=14, color=color,
                      label=f"tessera twin, max rank {rank} (fit on {sel[0].calibrated_on if sel else '-'})")
    ax[0].set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="real throughput (tok/s)",
              ylabel="predicted throughput (tok/s)", title="throughput, judged halves")
    ax[0].legend(fontsize=8)
    agree = np.array([r.real_starved == r.twin_starved for r in rows])
    rr = np.array([r.real_ratio for r in rows])
    tr = np.array([r.twin_ratio for r in rows])
    ax[1].scatter(rr[agree], tr[agree], s=14, color="tab:green", label=f"starvation agrees ({agree.sum()})")
    ax[1].scatter(rr[~agree], tr[~agree], s=30, color="tab:red", label=f"disagrees ({(~agree).sum()})")
    ax[1].axvline(threshold, color="grey", lw=0.8)
    ax[1].axhline(threshold, color="grey", lw=0.8)
    ax[1].plot((0, 1.05), (0, 1.05), color="grey", lw=0.5, ls=":")
    ax[1].set(xlabel="real throughput / offered", ylabel="twin throughput / offered",
              title=f"starvation rule (ratio < {threshold})")
    ax[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
