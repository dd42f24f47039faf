"""What the measured ITL of the real Qwen runs is made of, against the twin's (issue 26 item 3).

The runs' `itl_ms` is the benchmark client's mean gap between streamed chunks. vLLM 0.8.5's
V1 front end merges the token deltas of a request into one chunk when its consumer task is
still behind the engine (`vllm/v1/engine/output_processor.py`, `RequestOutputCollector.put`:
`self.output.add(output, aggregate=...)`), so a merged chunk counts one gap for several
engine steps. The engine's own time per token is read from the server's gauges instead:
every running decode request gets one token per step, so
`engine_ms = mean_running x duration / output tokens` (Little's law on the running set).
This prints, per regime, the median of engine_ms / itl_ms and of mean_tpot_ms / itl_ms,
and (given a `bench/twin_regimes.py` result) the twin's ITL error against each.

    .venv/bin/python -P bench/twin_itl_sources.py --regimes bench/results/twin_regimes_shipped.json
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from tessera.planner.twin.validate import RealRun, find_data_dir, load_runs

RESULTS = Path(__file__).parent / "results"


def engine_ms(run: RealRun) -> float:
    """The engine's time per output token of a running request, from the server's gauges."""
    return run.mean_running * run.duration / run.out_tokens * 1000


def regime(run: RealRun) -> str:
    load = "low rates" if run.low_rate else "high rates"
    starved = "starved" if run.starved else "unstarved"
    slots = "adapters <= slots" if run.n_adapters <= run.max_loras else "adapters > slots"
    return f"{load}, {starved}, {slots}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regimes", type=Path, help="a bench/twin_regimes.py result: the twin's ITL per judged run")
    args = ap.parse_args()
    runs = load_runs()
    with open(find_data_dir() / "qwen_runs.csv", newline="") as f:
        tpot = {i: float(r["mean_tpot_ms"] or "nan") for i, r in enumerate(csv.DictReader(f))}
    twin: dict[int, float] = {}
    if args.regimes:
        twin = {x["idx"]: x["twin_itl"] for x in json.loads(args.regimes.read_text())["halves rows"]}
    groups: dict[str, list[RealRun]] = {}
    for r in runs:
        groups.setdefault(regime(r), []).append(r)
    groups["all"] = runs
    out = {}
    print("| runs | n | engine / client ITL | TPOT / client ITL | twin vs client ITL | twin vs engine time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, rs in sorted(groups.items()):
        q = np.median([engine_ms(r) / r.itl_ms for r in rs])
        t = np.nanmedian([tpot[r.idx] / r.itl_ms for r in rs])
        e_itl = np.median([abs(twin[r.idx] / r.itl_ms - 1) for r in rs]) if twin else float("nan")
        e_eng = np.median([abs(twin[r.idx] / engine_ms(r) - 1) for r in rs]) if twin else float("nan")
        out[name] = {"n": len(rs), "engine_over_itl": float(q), "tpot_over_itl": float(t),
                     "twin_err_vs_itl": float(e_itl), "twin_err_vs_engine": float(e_eng)}
        print(f"| {name} | {len(rs)} | {q:.3f} | {t:.3f} | {100 * e_itl:.1f}% | {100 * e_eng:.1f}% |")
    (RESULTS / "twin_itl_sources.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
