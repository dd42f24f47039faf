"""How far a lower bound from the twin's step rules can go on the pools where tessera ends 2+ servers above it.

    .venv/bin/python -P bench/place_bound_limit.py   -> bench/results/place_bound_limit.{json,md}

Reads tessera's servers per scenario from bench/results/place_gate.json (bench/place_gate.py; its servers are
deterministic). For each scenario more than one server above the lower bound, it looks for a split of the pool
into two servers fewer than tessera's (adapters by rate, hottest first, cut into contiguous blocks) in which
every server carries its rate by the bound's own argument (bound.server_capacity_rps) with the step rules
charged at their most: a server of n adapters either gives each its own slot (n slots, n distinct adapters
in every step, each adapter loaded once in the hour) or has one slot (one adapter a step, and at most one load
per request: a load needs another adapter in the slot, which needs a request of it). A split found shows that
no bound built from step costs, slots, memory and loads alone reaches tessera's servers less one there: what
keeps such a split from passing in the twin is how many requests of the same adapters are in the server at
once (the adapter rule's polling cycle), which the step rules do not bound. Each server of a split found is
then put to the twin for an hour (seed 0, the twin check's rules) at the split's slot count, to show it is
the adapter rule, not the step costs, that stops it.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from tessera.planner.placement.bound import server_capacity_rps
from tessera.planner.placement.model import AdapterDemand, ServiceBound
from tessera.planner.placement.scenarios import Scenario, problem_of
from tessera.planner.placement.server import ServerModel
from tessera.planner.placement.twin_check import ServerCase, check_server
from tessera.planner.twin.workload import server_max_lora_rank

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
HOUR_MS = 3_600_000.0
CUTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200, 300, 400, 500, 600, 700)


def scenario_of(name: str) -> Scenario:
    match = re.fullmatch(r"(\w+)-(\d+)a-([\d.]+)rps-s([\d.]+)-(\d+)", name)
    assert match, name
    model, adapters, rate, skew, seed = match.groups()
    return Scenario(int(adapters), float(rate), model, float(skew), int(seed))


def charged_capacity(model: ServerModel, adapters: list[AdapterDemand]) -> tuple[float, int]:
    """Most req/s the server carries by the bound's argument with the step rules charged at their most, and
    the slot count that gives it (a slot each, or one slot)."""
    n, rate = len(adapters), sum(a.rate_rps for a in adapters)
    rank = server_max_lora_rank(max(a.rank for a in adapters))
    load_ms = model.profile.load_time_ms(rank)
    options = []
    if model.starts(n, rank):  # own slots: n adapters in every step, each loaded once in the hour
        options.append((server_capacity_rps(model, rank, slots=n, adapters_in_batch=n)
                        * (1.0 - n * load_ms / HOUR_MS), n))
    if n > 1:  # one slot: one adapter a step, a load per request at most, which blocks its step
        options.append((server_capacity_rps(model, rank, slots=1) * (1.0 - rate * load_ms / 1000.0), 1))
    return max(options)


def put_to_the_twin(model: ServerModel, bound: ServiceBound, adapters: list[AdapterDemand], slots: int) -> dict:
    rank = server_max_lora_rank(max(a.rank for a in adapters))
    check = check_server(ServerCase(model.profile, tuple(adapters), slots, rank, bound, seed=0))
    return {"twin_pass": check.passed, "twin_ratio": round(check.ratio, 3),
            "twin_worst_served": round(check.min_served_fraction, 3)}


def split_that_fits(model: ServerModel, bound: ServiceBound, adapters: list[AdapterDemand],
                    servers: int) -> list[dict] | None:
    hottest_first = sorted(adapters, key=lambda a: -a.rate_rps)
    for cuts in itertools.combinations([c for c in CUTS if c < len(adapters)], servers - 1):
        edges = (0, *cuts, len(adapters))
        blocks = [hottest_first[lo:hi] for lo, hi in zip(edges, edges[1:])]
        rows = []
        for block in blocks:
            capacity, slots = charged_capacity(model, block)
            rate = sum(a.rate_rps for a in block)
            if rate > capacity:
                break
            rows.append({"adapters": len(block), "rate_rps": round(rate, 2), "slots": slots,
                         "capacity_rps": round(capacity, 2)})
        else:
            return [{**row, **put_to_the_twin(model, bound, block, row["slots"])} for row, block in zip(rows, blocks)]
    return None


def main() -> None:
    gate = json.loads((OUT / "place_gate.json").read_text())
    results = []
    for row in gate["rows"]:
        servers, bound = row["after"]["servers"], row["lower_bound"]
        if servers - bound < 2:
            continue
        problem = problem_of(scenario_of(row["scenario"]))
        split = split_that_fits(ServerModel(problem), problem.bound, list(problem.adapters), servers - 2)
        results.append({"scenario": row["scenario"], "lower_bound": bound, "servers": servers,
                        "split_servers": servers - 2, "split": split})
    (OUT / "place_bound_limit.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["| scenario | lower bound | tessera | split into | servers of the split (adapters, req/s, slots, "
             "charged capacity req/s; the twin's hour: ratio, worst adapter) |", "|---|---|---|---|---|"]
    for r in results:
        split = "none found" if r["split"] is None else "; ".join(
            f"{s['adapters']}, {s['rate_rps']}, {s['slots']}, {s['capacity_rps']}; "
            f"{'passes' if s['twin_pass'] else 'fails'} {s['twin_ratio']}, {s['twin_worst_served']}" for s in r["split"])
        lines.append(f"| {r['scenario']} | {r['lower_bound']} | {r['servers']} | {r['split_servers']} | {split} |")
    (OUT / "place_bound_limit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
