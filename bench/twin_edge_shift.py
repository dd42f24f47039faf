"""How far a candidate Qwen profile moves the twin's served ratio at the starvation edge (issue 26).

The starvation predictors were trained on a sweep of the shipped profile
(planner/predictors/data/twin_sweep.parquet). A profile change that moves the ratio of
workloads near the 0.9 threshold across it makes their labels stale. This replays a
sample of the sweep's Qwen workloads whose ratio lies within 0.05 of the threshold with
the shipped profile and the candidate, side by side in one run (same seeds), and
reports the ratio shift and the labels that flip.

    nice -n 10 .venv/bin/python -P bench/twin_edge_shift.py CANDIDATE.yaml --label NAME --n 40
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from tessera.planner.twin.profile import ServerProfile, load_profile
from tessera.planner.twin.sim import STARVATION_RATIO
from tessera.planner.twin.sweep import draw_config, rates_for, simulate_as_swept

RESULTS = Path(__file__).parent / "results"
SWEEP = Path(__file__).parents[1] / "planner" / "predictors" / "data" / "twin_sweep.parquet"


def _ratio(job: tuple[ServerProfile, int]) -> float:
    profile, cid = job
    cfg = draw_config(cid)
    ranks, rates = rates_for(cfg)
    return float(simulate_as_swept(profile, ranks, rates, cfg.a_max, cid).ratio)


def edge_sample(n: int) -> list[int]:
    sweep = pd.read_parquet(SWEEP)
    near = sweep[(sweep.model == "qwen2.5-7b-instruct") & ~sweep.memory_error
                 & ((sweep.ratio - STARVATION_RATIO).abs() < 0.05)]
    return sorted(near.sample(n=min(n, len(near)), random_state=26).cid.astype(int).tolist())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidate", help="candidate profile YAML")
    ap.add_argument("--label", required=True)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    shipped, candidate = load_profile("qwen"), load_profile(args.candidate)
    cids = edge_sample(args.n)
    with ProcessPoolExecutor(args.workers) as pool:
        before = list(pool.map(_ratio, [(shipped, c) for c in cids]))
        after = list(pool.map(_ratio, [(candidate, c) for c in cids]))
    shift = np.array(after) - np.array(before)
    flips = [c for c, b, a in zip(cids, before, after) if (b < STARVATION_RATIO) != (a < STARVATION_RATIO)]
    out = {"n": len(cids), "median_abs_shift": float(np.median(np.abs(shift))),
           "max_abs_shift": float(np.max(np.abs(shift))), "mean_shift": float(shift.mean()), "flips": flips,
           "rows": [{"cid": c, "before": b, "after": a} for c, b, a in zip(cids, before, after)]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"twin_edge_shift_{args.label}.json").write_text(json.dumps(out, indent=1))
    print(f"{len(cids)} edge workloads: median |shift| {out['median_abs_shift']:.4f}, max {out['max_abs_shift']:.4f}, "
          f"mean {out['mean_shift']:+.4f}, labels flipped {len(flips)}: {flips}")


if __name__ == "__main__":
    main()
