"""Capacity curves: throughput / offered against the total request rate on one GPU,
the twin beside the compiled predictors, for a few adapter sets and slot counts.
Where a curve falls below 0.9 the server starves (overload at high rates; the
adapter rule with few slots and many adapters already at low rates); the
predictors' starvation flag should switch where the twin's curve crosses 0.9.

    .venv/bin/python -P bench/predictor_curves.py
        -> bench/results/predictor_curves.{json,png}
"""

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from rich.progress import track

from tessera.planner.predictors.predict import predict
from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sweep import simulate_as_swept

# (model, adapters, A_max, ranks, per-adapter rate weights): the real runs' 4:2:1 mix and ranks
CURVES = [("qwen", 128, 16, (8, 16, 32)), ("qwen", 448, 4, (16, 32)), ("qwen", 384, 32, (8, 16)),
          ("llama", 128, 32, (8, 16, 32))]
TOTAL_RATES = np.geomspace(0.5, 60.0, 16)
OUT = Path(__file__).parent / "results"


def adapters(n: int, ranks: tuple, total: float) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(n)
    w = np.array([4.0, 2.0, 1.0])[k % 3]
    return np.array(ranks)[k % len(ranks)], total * w / w.sum()


def point(args) -> dict:
    model, n, a_max, ranks, total = args
    prof = load_profile(model)
    rk, rates = adapters(n, ranks, total)
    res = simulate_as_swept(prof, rk, rates, a_max, seed=0)
    ratio, starved = predict(rk, rates, a_max, prof.model, prof.kv_tokens(a_max, int(rk.max())))
    return dict(model=model, n=n, a_max=a_max, ranks=list(ranks), total_rate=float(total),
                offered=res.offered_tok_s, twin=res.throughput_tok_s, twin_ratio=res.ratio,
                twin_starved=bool(res.starved), predicted_ratio=ratio, predicted_starved=bool(starved))


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 4), sharey=True)
    for ax, (model, n, a_max, ranks) in zip(axes, CURVES):
        pts = [p for p in points if (p["model"], p["n"], p["a_max"]) == (model, n, a_max)]
        rate = [p["total_rate"] for p in pts]
        ax.axhline(0.9, color="grey", lw=0.8, ls=":", label="starvation rule (0.9)")
        ax.plot(rate, [p["twin_ratio"] for p in pts], "o-", ms=4, label="twin")
        ax.plot(rate, [p["predicted_ratio"] for p in pts], "s--", ms=4, label="predictors")
        flagged = [p for p in pts if p["predicted_starved"]]
        ax.scatter([p["total_rate"] for p in flagged], [p["predicted_ratio"] for p in flagged], s=60,
                   facecolors="none", edgecolors="tab:red", label="predicted starved")
        ax.set(xscale="log", ylim=(0, 1.05), xlabel="total request rate (req/s)",
               title=f"{model}, {n} adapters, A_max {a_max}, ranks {'/'.join(map(str, ranks))}")
        ax.title.set_fontsize(9)
    axes[0].set_ylabel("throughput / offered")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    jobs = [(*c, float(r)) for c in CURVES for r in TOTAL_RATES]
    with ProcessPoolExecutor(2) as ex:
        points = list(track(ex.map(point, jobs), total=len(jobs), description="twin vs predictors"))
    agree = sum(p["twin_starved"] == p["predicted_starved"] for p in points)
    err = [abs(p["predicted_ratio"] - p["twin_ratio"]) / p["twin_ratio"] for p in points if p["twin_ratio"] > 0]
    summary = dict(points=len(points), starvation_agree=agree, median_abs_ratio_err=float(np.median(err)),
                   p90_abs_ratio_err=float(np.percentile(err, 90)))
    OUT.mkdir(exist_ok=True)
    (OUT / "predictor_curves.json").write_text(json.dumps({"summary": summary, "points": points}, indent=1))
    plot(points, OUT / "predictor_curves.png")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
