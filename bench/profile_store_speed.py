"""The profile store of 20 distinct systems: building it before and after the vectorised estimates (issue 29).

One command: `.venv/bin/python -P bench/profile_store_speed.py [--baseline main] [--rounds 5] [--systems 20]`.
The systems are bench/decompose_phases.py's (`bench_systems(20, True)`: the three examples in turn, each copy under
its own name, the i-th copy's demand lowered by i %), on an H100-80GB with no measurements, as the operator's solve
worker gets them (planner/contract.py plan_outcome). Each round times `build_profile_store` once with this
branch's planner and once with the baseline's (its planner/ folder, `git archive`d), each in a fresh process after
one untimed build (caches of coefficients and imports warm), alternating, so both see the same load; the table
gives medians and the ratio after / before. The stores are compared too: the same keys in the same order, sources
and spreads equal, latency and throughput to the largest relative difference found (the baseline estimated each
point with numpy's scalar power, this branch with its array power: they may differ in the last bit).
Writes bench/results/profile_store_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tessera.planner

if __name__ == "__main__" and sys.argv[1:2] == ["--one-build"]:
    # Before any planner module loads: they come from the folder asked for (this one or a baseline's).
    tessera.planner.__path__[:] = [sys.argv[2]]

from tessera.planner.profile_sources import build_profile_store

ROOT = Path(__file__).resolve().parents[1]
GPU = "H100-80GB"
RESULTS = ROOT / "bench" / "results" / "profile_store_speed.md"


def one_build(systems: int) -> dict:
    """Time one build of the store (after an untimed one) and return it with the store's values."""
    sys.path.insert(0, str(ROOT / "bench"))
    from decompose_phases import bench_systems

    specs = bench_systems(systems, True)
    build_profile_store(specs, GPU)
    started = time.perf_counter()
    store = build_profile_store(specs, GPU)
    seconds = time.perf_counter() - started
    values = [[variant, segment.mig_profile, segment.mps, batch, p.latency_ms, p.throughput_rps, p.spread,
               p.source.value] for (variant, segment, batch), p in store.items()]
    return {"seconds": seconds, "store": values}


def build_in_process(planner_dir: Path, systems: int) -> dict:
    command = [sys.executable, "-P", str(Path(__file__).resolve()), "--one-build", str(planner_dir), str(systems)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def compare_stores(before: list, after: list) -> str:
    """How far the two stores are apart: keys and order, sources and spreads exactly, numbers relatively."""
    if [row[:4] for row in before] != [row[:4] for row in after]:
        return "DIFFERENT keys or key order"
    if [row[6:] for row in before] != [row[6:] for row in after]:
        return "DIFFERENT spreads or sources"
    worst = max(abs(a / b - 1) for x, y in zip(before, after) for a, b in ((y[4], x[4]), (y[5], x[5])))
    identical = sum(x[4:6] == y[4:6] for x, y in zip(before, after))
    return (f"the same {len(after):,} keys in the same order, sources and spreads equal; latency and throughput "
            f"bit-identical on {identical:,} of them, the largest relative difference {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", metavar="REF", help="git revision built beside this one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--systems", type=int, default=20)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from planner_scale import baseline_planner

    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], capture_output=True,
                              text=True, check=True).stdout.strip()
    before: list[dict] = []
    after: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        baseline = baseline_planner(args.baseline, Path(scratch))
        for _ in range(args.rounds):
            before.append(build_in_process(baseline, args.systems))
            after.append(build_in_process(ROOT / "planner", args.systems))
    old, new = (statistics.median(r["seconds"] for r in runs) for runs in (before, after))
    lines = [
        f"# build_profile_store: {args.systems} distinct systems on {GPU}, before ({args.baseline} {revision}) "
        "and after",
        "",
        f"`.venv/bin/python -P bench/profile_store_speed.py --baseline {args.baseline} --rounds {args.rounds} "
        f"--systems {args.systems}`; medians of {args.rounds}, each build in a fresh process after an untimed one, "
        f"before and after alternating; 1-minute load average at the end {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} cores).",
        "",
        "| | before | after | after / before |",
        "|---|---|---|---|",
        f"| build_profile_store, s | {old:.3f} | {new:.3f} | {new / old:.3f}x ({old / new:.0f} times faster) |",
        "",
        "Each round, s (before / after): " + ", ".join(f"{b['seconds']:.3f} / {a['seconds']:.3f}"
                                                      for b, a in zip(before, after)),
        "",
        "The stores: " + compare_stores(before[0]["store"], after[0]["store"]) + ".",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__" and sys.argv[1:2] == ["--one-build"]:
    print(json.dumps(one_build(int(sys.argv[3]))))
elif __name__ == "__main__":
    main()
