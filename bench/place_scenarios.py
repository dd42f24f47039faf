"""tessera's adapter placement against the baselines and the lower bound, every server twin-checked.

    .venv/bin/python -P bench/place_scenarios.py [--workers 2] [--quick]
        -> bench/results/place_scenarios.{json,md}

Scenarios from ``tessera.planner.placement.scenarios`` (50 to 1,000 adapters,
ranks 8/16/32, Zipf-skewed rates, both twin models). Each strategy's servers are
simulated for one hour each (the twin check), the baselines exactly as tessera's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tessera.planner.placement import plan_placement
from tessera.planner.placement.scenarios import Scenario, problem_of

OUT = Path(__file__).resolve().parent / "results"
SCENARIOS = [Scenario(n, rate, model, skew) for model in ("qwen", "llama")
             for n, rate, skew in ((50, 8.0, 1.0), (100, 15.0, 1.5), (200, 30.0, 1.2), (500, 60.0, 0.8),
                                   (1000, 60.0, 1.2), (1000, 100.0, 1.0))]
QUICK = [Scenario(50, 8.0, "qwen"), Scenario(200, 30.0, "llama", 1.2)]


def summarize(report) -> dict:
    def row(p):
        checked = [s for s in p.servers if s.twin is not None]
        return {
            "strategy": p.strategy, "servers": p.servers_used, "place_ms": round(p.place_s * 1000, 1),
            "twin_s": round(p.twin_s or 0.0, 1),
            "cannot_start": p.count(lambda s: not s.starts),
            "twin_starved": sum(1 for s in checked if s.twin.starts and s.twin.starved),
            "servers_with_adapters_under_bound": sum(1 for s in checked
                                                     if s.twin.adapters_under_bound or s.twin.adapters_over_ttft),
            "twin_pass": p.twin_ok, "predicted_ok": p.predicted_ok,
            "disagree": [s.index for s in p.servers if s.disagrees],
            "twin_s_per_server": round(sum(s.twin.wall_s for s in checked) / max(1, len(checked)), 2),
        }

    return {"scenario": report.problem_name, "adapters": report.adapters, "rate_rps": round(report.rate_rps, 1),
            "lower_bound": report.lower_bound.servers, "capacity_bound_rps": round(report.lower_bound.capacity_rps, 1),
            "strategies": [row(p) for p in (report.placement, *report.baselines)]}


def verdicts(rows: list[dict]) -> dict:
    fewest, within_one = 0, 0
    for r in rows:
        tessera, *baselines = r["strategies"]
        passing = [b["servers"] for b in baselines if b["twin_pass"]]
        fewest += tessera["servers"] <= min(passing, default=10**9)
        within_one += tessera["servers"] - r["lower_bound"] <= 1
    return {"scenarios": len(rows), "tessera_fewest_among_passing": fewest, "tessera_within_one_of_bound": within_one,
            "tessera_twin_pass": sum(r["strategies"][0]["twin_pass"] for r in rows)}


def markdown(rows: list[dict], summary: dict) -> str:
    names = [s["strategy"] for s in rows[0]["strategies"]]
    head = ["scenario", "req/s", "bound"] + names
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = []
        for s in r["strategies"]:
            cell = f"{s['servers']}"
            flags = []
            if s["cannot_start"]:
                flags.append(f"{s['cannot_start']} no start")
            if s["twin_starved"]:
                flags.append(f"{s['twin_starved']} starved")
            if s["servers_with_adapters_under_bound"]:
                flags.append(f"{s['servers_with_adapters_under_bound']} under bound")
            cell += f" ({', '.join(flags)})" if flags else (" pass" if s["twin_pass"] else "")
            cells.append(cell)
        lines.append("| " + " | ".join([r["scenario"], str(r["rate_rps"]), str(r["lower_bound"])] + cells) + " |")
    lines.append("")
    lines.append(f"tessera uses the fewest servers among placements that pass the twin check in "
                 f"{summary['tessera_fewest_among_passing']}/{summary['scenarios']} scenarios, is within one server "
                 f"of the lower bound in {summary['tessera_within_one_of_bound']}/{summary['scenarios']}, and passes "
                 f"the twin check in {summary['tessera_twin_pass']}/{summary['scenarios']}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="two small scenarios only")
    args = parser.parse_args()
    rows = []
    started = time.perf_counter()
    for scenario in QUICK if args.quick else SCENARIOS:
        report = plan_placement(problem_of(scenario), workers=args.workers)
        rows.append(summarize(report))
        print(json.dumps({k: rows[-1][k] for k in ("scenario", "lower_bound")}),
              [(s["strategy"], s["servers"], s["twin_pass"]) for s in rows[-1]["strategies"]], flush=True)
    summary = verdicts(rows)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    OUT.mkdir(exist_ok=True)
    suffix = "_quick" if args.quick else ""
    (OUT / f"place_scenarios{suffix}.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    (OUT / f"place_scenarios{suffix}.md").write_text(markdown(rows, summary) + "\n")
    print(markdown(rows, summary))


if __name__ == "__main__":
    main()
