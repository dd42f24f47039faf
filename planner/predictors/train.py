"""Train the throughput regressor and the starvation classifier on the twin's sweep.

Targets: ratio = throughput / offered (bounded, what a shallow tree can learn)
and starved = ratio < 0.9. Split: whole A_max and adapter-count levels are held
out (a random split of a grid leaks neighbours into the test set). The fitted
trees are compiled to Python code in ``_compiled.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .features import FEATURES, frame_features

HELD_OUT_A = (24, 96, 320)
HELD_OUT_N = (48, 192, 448)
DATA = Path(__file__).with_name("data") / "twin_sweep.parquet"
COMPILED = Path(__file__).with_name("_compiled.py")


def smape(y, p) -> float:
    y, p = np.asarray(y, float), np.asarray(p, float)
    return float(np.mean(2 * np.abs(p - y) / np.maximum(np.abs(y) + np.abs(p), 1e-12)))


def macro_f1(y, p) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(np.asarray(y, int), np.asarray(p, int), average="macro"))


@dataclass
class Trained:
    regressor: object
    classifier: object
    metrics: dict


def load_table(path: Path = DATA):
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    mask = ~np.asarray(t.column("memory_error").to_numpy(zero_copy_only=False), bool)
    return t.filter(mask)


def split(t):
    a = t.column("a_max").to_numpy()
    n = t.column("n_adapters").to_numpy()
    test = np.isin(a, HELD_OUT_A) | np.isin(n, HELD_OUT_N)
    return ~test, test


def train(path: Path = DATA, reg_depth: int = 12, clf_depth: int = 10, seed: int = 0) -> Trained:
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    t = load_table(path)
    X = frame_features(t)
    y = t.column("ratio").to_numpy()
    s = np.asarray(t.column("starved").to_numpy(zero_copy_only=False), int)
    tr, te = split(t)
    reg = DecisionTreeRegressor(max_depth=reg_depth, min_samples_leaf=3, random_state=seed).fit(X[tr], y[tr])
    clf = DecisionTreeClassifier(max_depth=clf_depth, min_samples_leaf=2, class_weight="balanced",
                                 random_state=seed).fit(X[tr], s[tr])
    pr = np.clip(reg.predict(X[te]), 0, None)
    metrics = dict(n_train=int(tr.sum()), n_test=int(te.sum()), held_out_a=HELD_OUT_A, held_out_n=HELD_OUT_N,
                   smape_ratio=smape(y[te], pr), macro_f1=macro_f1(s[te], clf.predict(X[te])),
                   starved_from_regressor_f1=macro_f1(s[te], pr < 0.9),
                   reg_leaves=int(reg.get_n_leaves()), clf_leaves=int(clf.get_n_leaves()),
                   reg_depth=int(reg.get_depth()), clf_depth=int(clf.get_depth()))
    return Trained(reg, clf, metrics)


def compile_trained(tr: Trained, path: Path = COMPILED) -> None:
    from .compile import write_module

    write_module(path, {"ratio_tree": (tr.regressor, "regressor"), "starved_tree": (tr.classifier, "classifier")},
                 FEATURES, "Compiled predictors: throughput/offered and starvation flag of a twin workload.\n\n"
                 f"Held-out metrics at training time: {tr.metrics}")
