"""The ablation table: maximum demand of the three example systems on 120 H100-80GB, per feature subset.

Run: .venv/bin/python bench/capacity_ablation.py [--gpus 120] [--time-limit 120] [--examples NAME ...]
Writes bench/results/capacity_ablation.{md,json} (with --examples other than
the three: capacity_ablation-NAME+NAME.{md,json}); the same table as
`tessera capacity examples/traffic-analysis.yaml examples/social-media.yaml
examples/ar-assistant.yaml --gpus 120`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from tessera.render import capacity_markdown, capacity_rich
from tessera.planner.capacity import capacity
from tessera.planner.model import Pool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import PlannerOptions
from tessera.planner.spec_file import load_systems

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["traffic-analysis", "social-media", "ar-assistant"]
GPU = "H100-80GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=120)
    parser.add_argument("--time-limit", type=float, default=120.0, help="Seconds per feature subset.")
    parser.add_argument("--examples", nargs="+", default=EXAMPLES, help="Example systems (names in examples/).")
    args = parser.parse_args()
    systems = [s for name in args.examples for s in load_systems(ROOT / "examples" / f"{name}.yaml")]
    stem = "capacity_ablation" if args.examples == EXAMPLES else "capacity_ablation-" + "+".join(args.examples)
    store = build_profile_store(systems, GPU)
    console = Console()
    with Progress(console=console) as progress:
        bar = progress.add_task("feature subsets", total=8)
        table = capacity(systems, Pool(gpu=GPU, gpus=args.gpus), store,
                         options=PlannerOptions(time_limit_s=args.time_limit),
                         progress=lambda _: progress.advance(bar))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(table.model_dump_json(indent=2))
    (out / f"{stem}.md").write_text(
        f"Maximum demand served on {args.gpus} x {GPU} by {', '.join(args.examples)} together "
        "(every system's demand scaled by one common factor), per feature subset, with estimated "
        f"profiles; time limit {args.time_limit:g} s per subset.\n\n" + capacity_markdown(table) + "\n")
    console.print(capacity_rich(table))


if __name__ == "__main__":
    main()
