"""tessera's placement before and after the twin gate (split what the twin fails, merge what it passes), one run.

    nice -n 10 .venv/bin/python -P bench/place_gate.py [--workers 2] -> bench/results/place_gate.{json,md}

The scenarios of bench/place_scenarios.py plus issue 26's 64-adapter pool. For
each: servers and gap to the lower bound without the gate (the predictors' packing,
twin-checked) and with it, and the gated placement checked again by an
independent hour of the twin (another request-stream seed), every adapter
judged against the service bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tessera.planner.placement import plan_placement
from tessera.planner.placement.scenarios import Scenario, problem_of
from tessera.planner.placement.server import ServerModel
from tessera.planner.placement.twin_check import check_placement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from place_scenarios import SCENARIOS

OUT = Path(__file__).resolve().parent / "results"
INDEPENDENT_SEED = 7919


def one(scenario: Scenario, workers: int) -> dict[str, object]:
    problem = problem_of(scenario)
    started = time.perf_counter()
    before = plan_placement(problem, baselines=(), workers=workers, gate=False)
    after = plan_placement(problem, baselines=(), workers=workers)
    gated = after.placement
    again = check_placement(gated, problem.adapters, ServerModel(problem).profile, problem.bound,
                            seed=INDEPENDENT_SEED, workers=workers)
    bound = after.lower_bound.servers
    return {"scenario": scenario.name, "lower_bound": bound,
            "before": {"servers": before.placement.servers_used, "twin_pass": before.placement.twin_ok},
            "after": {"servers": gated.servers_used, "twin_pass": gated.twin_ok,
                      "predicted_unhealthy_kept": sum(not s.predicted_ok for s in gated.servers)},
            "independent_hour_pass": again.twin_ok,
            "independent_worst_served": min(s.twin.min_served_fraction for s in again.servers if s.twin),
            "wall_s": round(time.perf_counter() - started, 1)}


def markdown(rows: list[dict]) -> str:
    lines = ["| scenario | bound | servers before | servers after | after - bound | twin check after "
             "| independent hour | worst served |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['scenario']} | {r['lower_bound']} | {b['servers']}{'' if b['twin_pass'] else ' FAIL'} "
                     f"| {a['servers']} | +{a['servers'] - r['lower_bound']} | {'pass' if a['twin_pass'] else 'FAIL'} "
                     f"| {'pass' if r['independent_hour_pass'] else 'FAIL'} | {r['independent_worst_served']:.3f} |")
    within = sum(r["after"]["servers"] - r["lower_bound"] <= 1 for r in rows)
    return "\n".join(lines) + f"\n\nwithin one server of the bound after the gate: {within}/{len(rows)}\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows = [one(s, args.workers) for s in [Scenario(64, 28.0, "qwen", 0.3), *SCENARIOS]]
    OUT.mkdir(exist_ok=True)
    (OUT / "place_gate.json").write_text(json.dumps(rows, indent=1))
    (OUT / "place_gate.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
