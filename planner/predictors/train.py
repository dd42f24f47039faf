"""Train the throughput regressor and the starvation classifier on the twin's sweep.

Targets: ratio = throughput / offered (bounded, what a shallow tree can learn)
and starved = ratio < 0.9. Split: whole A_max and adapter-count levels are held
out (a random split of a grid leaks neighbours into the test set). The fitted
trees are compiled to Python code in ``_compiled.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tessera.planner.twin.profile import ServerProfile
from tessera.planner.twin.sim import STARVATION_RATIO

from .compile import FittedTree
from .workload_features import FEATURES, TOKENS_PER_REQUEST, frame_features

if TYPE_CHECKING:
    from tessera.planner.twin.validate import RealRun

# A pyarrow Table of the sweep (pyarrow ships no type stubs).
SweepTable = Any

HELD_OUT_A = (24, 96, 320)
HELD_OUT_N = (48, 192, 448)
DATA = Path(__file__).with_name("data") / "twin_sweep.parquet"
# extra request-stream seeds of the workloads whose ratio fell within 0.05 of the
# threshold (tessera.planner.twin.sweep.run_reseed); their label is the mean's
SEEDS = Path(__file__).with_name("data") / "twin_sweep_seeds.parquet"
# classifier hyper-parameters chosen by tune() on inner folds of the training levels
# (never by the held-out score). Each inner fold holds out one interior A_max level and
# one interior adapter-count level of the training part, as the held-out split does
# (its levels are interior too); nine folds cover every interior training level (three
# folds of two levels each ranked settings by noise: their spread was as wide as the
# differences). On issue 26's resweep (vLLM's rules in the profiles) best mean macro-F1
# 0.9667 (depth 6, min leaf 1, no class weights; on the sweep before it 0.9663, depth 10,
# min leaf 2, balanced); ties go to the shallower / larger-leaf tree. The same folds chose the
# feature set, each scored by its best unweighted tree of depth 6-12 and min leaf 1-5:
# with the cycle and overload features 0.9655, the cycle pair alone 0.9644, the
# overload pair alone 0.9614, neither 0.9607 (the sweep before); the per-slot cost in the
# step-time features 0.9693 against 0.9652 without (the resweep, with a third of its extra seeds).
_A_INNER = (8, 16, 32, 48, 64, 128, 192, 256, 384)
_N_INNER = (16, 32, 64, 96, 128, 256, 320, 384, 16)
INNER_FOLDS = tuple(((a,), (n,)) for a, n in zip(_A_INNER, _N_INNER))
CLF_PARAMS: dict[str, Any] = dict(max_depth=6, min_samples_leaf=1, class_weight=None)
COMPILED = Path(__file__).with_name("_compiled.py")


def smape(y: ArrayLike, p: ArrayLike) -> float:
    y, p = np.asarray(y, float), np.asarray(p, float)
    return float(np.mean(2 * np.abs(p - y) / np.maximum(np.abs(y) + np.abs(p), 1e-12)))


def macro_f1(y: ArrayLike, p: ArrayLike) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(np.asarray(y, int), np.asarray(p, int), average="macro"))


@dataclass
class Trained:
    regressor: FittedTree  # ratio, all workloads
    classifier: FittedTree  # starved flag
    capacity: FittedTree  # log throughput (tokens/s) of starved workloads
    metrics: dict[str, Any]

    def predict_ratio(self, X: np.ndarray) -> np.ndarray:
        """Hybrid: a starved workload's throughput is the server's capacity, which a tree
        learns far better than the ratio (capacity / offered falls as 1/rate)."""
        starved = self.classifier.predict(X) == 1
        offered = X[:, FEATURES.index("total_rate")] * TOKENS_PER_REQUEST
        cap = np.minimum(np.exp(self.capacity.predict(X)) / offered, 1.0)
        ratio: np.ndarray = np.where(starved, cap, np.clip(self.regressor.predict(X), 0, None))
        return ratio


def load_table(path: Path = DATA) -> SweepTable:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    mask = ~np.asarray(t.column("memory_error").to_numpy(zero_copy_only=False), bool)
    return t.filter(mask)


def near_threshold_ids(band: float, path: Path = DATA) -> list[int]:
    """Config ids of the sweep's workloads whose ratio lies within ``band`` of the starvation
    ratio: one seed leaves their label to chance, so they get more seeds (``run_reseed``)."""
    t = load_table(path)
    near = np.abs(t.column("ratio").to_numpy() - STARVATION_RATIO) < band
    return [int(c) for c in t.column("cid").to_numpy()[near]]


def denoised_ratio(t: SweepTable, seeds_path: Path | None = SEEDS) -> np.ndarray:
    """Per-row ratio averaged over the sweep's seed and any extra seeds in seeds_path."""
    ratio: np.ndarray = t.column("ratio").to_numpy().astype(float)
    if seeds_path is None or not Path(seeds_path).exists():
        return ratio
    import pyarrow.parquet as pq

    ex = pq.read_table(seeds_path).to_pydict()
    extra: dict[int, list[float]] = {}
    for c, r in zip(ex["cid"], ex["ratio"]):
        extra.setdefault(int(c), []).append(float(r))
    cid = t.column("cid").to_numpy()
    return np.array([np.mean([ratio[i]] + extra[int(c)]) if int(c) in extra else ratio[i]
                     for i, c in enumerate(cid)])


def split(t: SweepTable) -> tuple[np.ndarray, np.ndarray]:
    a = t.column("a_max").to_numpy()
    n = t.column("n_adapters").to_numpy()
    test = np.isin(a, HELD_OUT_A) | np.isin(n, HELD_OUT_N)
    return ~test, test


def train(path: Path = DATA, reg_depth: int = 10, cap_depth: int = 10, seed: int = 0,
          all_rows: bool = False) -> Trained:
    """Fit on the training levels (or on every row with all_rows, for the shipped trees)."""
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    t = load_table(path)
    X = frame_features(t)
    s1 = np.asarray(t.column("starved").to_numpy(zero_copy_only=False), int)  # one seed
    y = denoised_ratio(t, SEEDS if path == DATA else None)
    s = (y < STARVATION_RATIO).astype(int)
    tr, te = split(t)
    if all_rows:
        tr = np.ones_like(tr)
    thr = t.column("throughput").to_numpy()
    st = tr & (s == 1) & (thr > 0)
    cap = DecisionTreeRegressor(max_depth=cap_depth, min_samples_leaf=3, random_state=seed).fit(
        X[st], np.log(thr[st]))
    reg = DecisionTreeRegressor(max_depth=reg_depth, min_samples_leaf=3, random_state=seed).fit(X[tr], y[tr])
    clf = DecisionTreeClassifier(**CLF_PARAMS, random_state=seed).fit(X[tr], s[tr])
    pr = np.clip(reg.predict(X[te]), 0, None)
    out = Trained(reg, clf, cap, {})
    ph = out.predict_ratio(X[te])
    out.metrics = dict(n_train=int(tr.sum()), n_test=int(te.sum()), held_out_a=HELD_OUT_A, held_out_n=HELD_OUT_N,
                   smape_ratio_single_tree=smape(y[te], pr), smape_ratio=smape(y[te], ph),
                   smape_ratio_unstarved=smape(y[te][s[te] == 0], ph[s[te] == 0]),
                   smape_ratio_starved=smape(y[te][s[te] == 1], ph[s[te] == 1]), macro_f1=macro_f1(s[te], clf.predict(X[te])),
                   macro_f1_single_seed_labels=macro_f1(s1[te], clf.predict(X[te])),
                   misclassified=int((clf.predict(X[te]) != s[te]).sum()),
                   labels_changed_by_seeds=int((s != s1).sum()),
                   starved_from_regressor_f1=macro_f1(s[te], pr < STARVATION_RATIO),
                   reg_leaves=int(reg.get_n_leaves()), clf_leaves=int(clf.get_n_leaves()),
                   cap_leaves=int(cap.get_n_leaves()), reg_depth=int(reg.get_depth()),
                   clf_depth=int(clf.get_depth()), cap_depth=int(cap.get_depth()), all_rows=all_rows)
    return out


def compile_trained(tr: Trained, path: Path = COMPILED) -> None:
    from .compile import write_module

    write_module(path, {"ratio_tree": (tr.regressor, "regressor"), "starved_tree": (tr.classifier, "classifier"),
                        "log_capacity_tree": (tr.capacity, "regressor")},
                 FEATURES, "Compiled predictors: throughput/offered and starvation flag of a twin workload.\n\n"
                 f"Held-out metrics at training time: {tr.metrics}")


def real_run_features(run: RealRun, profile: ServerProfile) -> list[float]:
    from .workload_features import features

    n = run.n_adapters
    ranks = np.array([run.ranks[i % len(run.ranks)] for i in range(n)])
    # the client fell behind at high load: the rates it actually offered are the
    # nominal ones scaled by (actual arrivals / nominal expected arrivals)
    rates = np.array(run.rate_multiset[:n]) * run.arrivals / (sum(run.rate_multiset[:n]) * run.duration)
    return features(ranks, rates, run.max_loras, profile.model, profile.kv_tokens(run.max_loras, run.max_rank))


def evaluate_on_real(tr: Trained, runs: list[RealRun] | None = None) -> dict[str, Any]:
    """Predictors (trained on 600 s twin workloads) against the real 3600 s Qwen runs."""
    from tessera.planner.twin.profile import load_profile
    from tessera.planner.twin.validate import load_runs

    prof = load_profile("qwen")
    runs = runs if runs is not None else load_runs()
    X = np.array([real_run_features(r, prof) for r in runs])
    y = np.array([r.throughput / r.ideal for r in runs])
    s = np.array([int(r.starved) for r in runs])
    ph = tr.predict_ratio(X)
    return dict(n=len(runs), smape_ratio=smape(y, ph), macro_f1=macro_f1(s, tr.classifier.predict(X)),
                starvation_agree=int((tr.classifier.predict(X) == s).sum()),
                smape_ratio_unstarved=smape(y[s == 0], ph[s == 0]), smape_ratio_starved=smape(y[s == 1], ph[s == 1]))


def tune(path: Path = DATA, depths: tuple[int, ...] = (6, 8, 10, 12), leaves: tuple[int, ...] = (1, 2, 3, 5, 8, 12, 20),
         weights: tuple[str | None, ...] = ("balanced", None)) -> list[tuple[float, int, int, str | None]]:
    """Classifier hyper-parameters scored on INNER_FOLDS of the training levels only
    (the held-out levels are never looked at). Returns (mean macro-F1, depth, leaf,
    class_weight) best first; CLF_PARAMS holds the winner."""
    from sklearn.tree import DecisionTreeClassifier

    t = load_table(path)
    X = frame_features(t)
    s = (denoised_ratio(t, SEEDS if path == DATA else None) < STARVATION_RATIO).astype(int)
    a = t.column("a_max").to_numpy()
    n = t.column("n_adapters").to_numpy()
    tr, _ = split(t)
    out = []
    for d in depths:
        for leaf in leaves:
            for w in weights:
                sc = []
                for fa, fn in INNER_FOLDS:
                    it = tr & (np.isin(a, fa) | np.isin(n, fn))
                    m = DecisionTreeClassifier(max_depth=d, min_samples_leaf=leaf, class_weight=w,
                                               random_state=0).fit(X[tr & ~it], s[tr & ~it])
                    sc.append(macro_f1(s[it], m.predict(X[it])))
                out.append((float(np.mean(sc)), d, leaf, w))
    out.sort(key=lambda r: (-round(r[0], 4), r[1], -r[2]))
    return out
