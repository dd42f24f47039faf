"""Running requests and ITL of the twin against the measured ones as the output-length spread grows (issue 26).

At the high rates on 8-16 slots with more adapters than slots the twin holds 1.4-1.6x the
measured running requests, with steps (ITL) 1.4-1.5x the measured, at about the measured
throughput. An adapter holds its slot while any of its requests runs (vLLM 0.8.5's
`Scheduler.schedule` builds the adapter set from the running requests), so how long a
slot stays with one adapter is set by the longest of its requests: the tail of the output
lengths. This replays such runs (and a few low-rate ones as a control) with the shipped
lognormal spread and wider ones, one seed each, everything else the shipped profile.

    nice -n 10 .venv/bin/python -P bench/twin_length_tail.py   # -> bench/results/twin_length_tail.json
"""

from __future__ import annotations

import json
from pathlib import Path

from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.validate import load_runs, replay

RESULTS = Path(__file__).parent / "results"
RUNS = (83, 49, 77, 51, 82, 35, 22, 115, 0, 13, 2, 41)  # qwen_runs.csv rows
SIGMAS = (None, 0.8, 1.1)  # None: the shipped profile's fitted spread


def main() -> None:
    shipped = load_profile("qwen")
    by_idx = {r.idx: r for r in load_runs()}
    runs = [by_idx[i] for i in RUNS]
    rows = []
    for sigma in SIGMAS:
        profile = shipped if sigma is None else shipped.with_updates(lengths={"sigma": sigma})
        table = replay(runs, profile, seeds=1, workers=2)
        for r in runs:
            t = table[r.idx]
            rows.append({"sigma": profile.lengths.sigma, "idx": r.idx, "n": r.n_adapters, "A": r.max_loras,
                         "rates": "low" if r.low_rate else "high", "running": [r.mean_running, t.running],
                         "itl_ms": [r.itl_ms, t.itl_ms], "throughput": [r.throughput, t.throughput]})
            print(f"sigma {profile.lengths.sigma:.3f} run {r.idx:3d} {r.n_adapters:3d} on {r.max_loras:3d} "
                  f"{rows[-1]['rates']:4s} running {r.mean_running:6.0f} / {t.running:6.0f}  "
                  f"ITL {r.itl_ms:6.1f} / {t.itl_ms:6.1f}  tok/s {r.throughput:6.0f} / {t.throughput:6.0f}")
    (RESULTS / "twin_length_tail.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
