"""Per-call latency of the compiled predictors, with and without computing the features.

    .venv/bin/python -P bench/predictor_speed.py   -> bench/results/predictor_speed.json
"""

import json
import timeit
from pathlib import Path

import numpy as np

from tessera.planner.predictors import _compiled as compiled_trees
from tessera.planner.predictors.workload_features import MODEL_IDS, feature_vector, features
from tessera.planner.twin.workload import active_adapters
from tessera.planner.predictors.predict import predict_features


def main() -> None:
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
    res["note"] = ("per call, CPython, one core of a shared 2-core machine; tree_only = compiled tree on a "
                   "ready feature list; aggregates = sums/maxima kept incrementally by the placement loop; "
                   "arrays = numpy reductions over 128 adapters per call")
    Path(__file__).parent.joinpath("results").mkdir(exist_ok=True)
    Path(__file__).parent.joinpath("results", "predictor_speed.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
