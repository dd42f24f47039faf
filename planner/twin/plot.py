"""Timeline PNG of a twin run: running, waiting and KV usage over time."""

from __future__ import annotations

from pathlib import Path


def timeline_png(res, path: str | Path, title: str = "") -> None:
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
