"""Per-call latency of the compiled predictors, with and without computing the features.

    .venv/bin/python -P bench/predictor_speed.py [--ref main]   -> bench/results/predictor_speed.json

With ``--ref``, that revision's compiled trees (``git show REF:planner/predictors/_compiled.py``) are
timed too, alternating with this tree's on the same feature list, and the ratios are written.
"""

import argparse
import importlib.util
import json
import subprocess
import tempfile
import timeit
from pathlib import Path

import numpy as np

from tessera.planner.predictors import _compiled as compiled_trees
from tessera.planner.predictors.workload_features import MODEL_IDS, feature_vector, features
from tessera.planner.twin.workload import active_adapters
from tessera.planner.predictors.predict import predict_features


def ref_trees(ref: str, directory: Path):
    source = subprocess.run(["git", "show", f"{ref}:planner/predictors/_compiled.py"], check=True, capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[1]).stdout
    (directory / "ref_compiled.py").write_text(source)
    spec = importlib.util.spec_from_file_location("ref_compiled", directory / "ref_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree_ab(ref: str, f: list, rounds: int = 5, reps: int = 100_000) -> dict:
    """Both revisions' trees on one feature list, alternating; medians over the rounds and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        old = ref_trees(ref, Path(tmp))
        out = {}
        for name in ("ratio_tree", "starved_tree", "log_capacity_tree"):
            times: dict[str, list[float]] = {"ref": [], "this": []}
            for _ in range(rounds):
                for label, module in (("ref", old), ("this", compiled_trees)):
                    tree = getattr(module, name)
                    times[label].append(timeit.timeit(lambda t=tree: t(*f), number=reps) / reps * 1e6)
            ref_us, this_us = float(np.median(times["ref"])), float(np.median(times["this"]))
            out[name] = {"ref_us": ref_us, "this_us": this_us, "this_over_ref": this_us / ref_us}
        return {"ref": ref, **out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", help="also time this git revision's compiled trees, alternating")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = 128
    ranks = rng.choice([8, 16, 32], n)
    rates = rng.choice([0.1, 0.05, 0.025], n)
    kv = 526992.0
    f = features(ranks, rates, 32, "qwen2.5-7b-instruct", kv)
    # precomputed aggregates (what an incremental placement loop keeps per GPU)
    agg = (n, 32, int(ranks.max()), float(ranks.mean()), float(rates.sum()), float(rates.max()),
           float(rates.std() / rates.mean()), kv, MODEL_IDS["qwen2.5-7b-instruct"], *active_adapters(rates))
    reps = 200_000
    res = {}
    res["tree_only_us"] = {
        "ratio": timeit.timeit(lambda: compiled_trees.ratio_tree(*f), number=reps) / reps * 1e6,
        "starved": timeit.timeit(lambda: compiled_trees.starved_tree(*f), number=reps) / reps * 1e6,
        "both_via_predict_features": timeit.timeit(lambda: predict_features(f), number=reps) / reps * 1e6,
    }
    res["with_feature_vector_from_aggregates_us"] = timeit.timeit(
        lambda: compiled_trees.starved_tree(*feature_vector(*agg)), number=reps) / reps * 1e6
    r2 = 20_000
    res["with_features_from_arrays_us"] = timeit.timeit(
        lambda: compiled_trees.starved_tree(*features(ranks, rates, 32, "qwen2.5-7b-instruct", kv)), number=r2) / r2 * 1e6
    if args.ref:
        res["trees_against_ref"] = tree_ab(args.ref, f)
    res["note"] = ("per call, CPython, one core of a shared 2-core machine; tree_only = compiled tree on a "
                   "ready feature list; aggregates = sums/maxima kept incrementally by the placement loop; "
                   "arrays = numpy reductions over 128 adapters per call")
    Path(__file__).parent.joinpath("results").mkdir(exist_ok=True)
    Path(__file__).parent.joinpath("results", "predictor_speed.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
