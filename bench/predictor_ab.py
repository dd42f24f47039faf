"""The predictors' held-out and real-run scores per class and per regime, for a before/after comparison.

The features take the twin's step constants from the shipped profiles, so an
earlier sweep's trees can only be scored by its own tree: run this with
``--label before`` in a checkout of the earlier revision (its sweep, profiles
and ``train``) and ``--label after`` here, then ``--compare``. Per label: the
held-out twin levels (SMAPE of throughput / offered, starvation F1 per class
and macro) and the 163 real Qwen runs (SMAPE, starvation agreement), the real
runs also per regime of bench/twin_regimes.py.

    nice -n 10 .venv/bin/python -P bench/predictor_ab.py --label before|after
        -> bench/results/predictor_ab_<label>.json
    .venv/bin/python -P bench/predictor_ab.py --compare before after   -> bench/results/predictor_ab.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tessera.planner.predictors import train
from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.validate import RealRun, load_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from twin_regimes import REGIMES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"


def class_f1(trained: train.Trained, data: Path, seeds: Path) -> dict[str, float]:
    """F1 of each class on the held-out levels (the denoised labels train() scores against)."""
    from sklearn.metrics import f1_score

    t = train.load_table(data)
    _, test = train.split(t)
    y = (train.denoised_ratio(t, seeds) < train.STARVATION_RATIO).astype(int)[test]
    predicted = trained.classifier.predict(train.frame_features(t)[test])
    healthy, starved = f1_score(y, predicted, average=None, labels=[0, 1])
    return {"healthy": float(healthy), "starved": float(starved)}


def real_by_regime(trained: train.Trained, runs: list[RealRun]) -> dict[str, dict[str, object]]:
    profile = load_profile("qwen")
    out: dict[str, dict[str, object]] = {}
    for name, inside in {"all": lambda r: True, **REGIMES}.items():
        held = [r for r in runs if inside(r)]
        X = np.array([train.real_run_features(r, profile) for r in held])
        ratio = np.array([r.throughput / r.ideal for r in held])
        agree = int((trained.classifier.predict(X) == np.array([int(r.starved) for r in held])).sum())
        out[name] = {"n": len(held), "agree": agree, "smape": train.smape(ratio, trained.predict_ratio(X))}
    return out


def one(data: Path, seeds: Path, runs: list[RealRun]) -> dict[str, object]:
    trained = train.train(data)
    m = trained.metrics
    return {"rows": int(train.load_table(data).num_rows), "held_out_n": m["n_test"], "smape": m["smape_ratio"],
            "smape_unstarved": m["smape_ratio_unstarved"], "smape_starved": m["smape_ratio_starved"],
            "macro_f1": m["macro_f1"], "f1": class_f1(trained, data, seeds), "misclassified": m["misclassified"],
            "leaves": {"ratio": m["reg_leaves"], "starved": m["clf_leaves"], "capacity": m["cap_leaves"]},
            "real": real_by_regime(trained, runs)}


def markdown(before: dict, after: dict, labels: tuple[str, str]) -> str:
    pct = "{:.1%}".format
    lines = [f"Predictors of `{labels[0]}` and `{labels[1]}`, each trained on its own sweep by its own `train`.", "",
             f"| set | measure | {labels[0]} | {labels[1]} |", "|---|---|---|---|"]
    for key, label, fmt in [("smape", "SMAPE ratio", pct), ("smape_unstarved", "SMAPE unstarved", pct),
                            ("smape_starved", "SMAPE starved", pct), ("macro_f1", "starvation macro-F1", "{:.3f}".format),
                            ("misclassified", "misclassified", str)]:
        lines.append(f"| held-out twin levels (n {before['held_out_n']} / {after['held_out_n']}) | {label} "
                     f"| {fmt(before[key])} | {fmt(after[key])} |")
    for cls in ("healthy", "starved"):
        lines.append(f"| held-out twin levels | F1 {cls} | {before['f1'][cls]:.3f} | {after['f1'][cls]:.3f} |")
    for group, b in before["real"].items():
        a = after["real"][group]
        lines.append(f"| real Qwen runs, {group} (n {b['n']}) | starvation agree, SMAPE ratio "
                     f"| {b['agree']}/{b['n']}, {pct(b['smape'])} | {a['agree']}/{a['n']}, {pct(a['smape'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        b, a = (json.loads((OUT / f"predictor_ab_{label}.json").read_text()) for label in args.compare)
        (OUT / "predictor_ab.md").write_text(markdown(b, a, tuple(args.compare)))
        print(markdown(b, a, tuple(args.compare)))
        return
    OUT.mkdir(exist_ok=True)
    result = one(train.DATA, train.SEEDS, load_runs())
    (OUT / f"predictor_ab_{args.label}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
