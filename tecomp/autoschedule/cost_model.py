"""The search's learned cost model: gradient-boosted regression trees in numpy.

:class:`CostModel` is trained, per workload, on the candidates measured so far (their
knob values as features, ``-log(seconds)`` as the target, failures below the worst
time) and ranks new candidates: a higher score means predicted faster.  The trees are
:class:`GBDT` (squared loss, depth-limited trees grown greedily on quantile thresholds,
shrinkage and row subsampling), so no dependency is needed; with
``TECOMP_COST_MODEL=xgboost`` and xgboost installed, ``xgboost.XGBRegressor`` is used
instead (:func:`model_from_env`).
"""
from __future__ import annotations

import math
import warnings
from typing import List, Optional, Sequence

import numpy as np

from ..threads import choice_from_env


#: the values of ``TECOMP_COST_MODEL``: tecomp's own boosted trees (the default) or xgboost's
COST_MODELS = ("trees", "xgboost")


def model_from_env() -> str:
    """``TECOMP_COST_MODEL`` as the search reads it (:data:`COST_MODELS`; any case, blanks
    around ignored; unset, blank or another value: ``trees``, the last with a warning)."""
    return choice_from_env("TECOMP_COST_MODEL", COST_MODELS, "trees",
                           "the auto-scheduler's cost model")


class _Tree:
    """A regression tree: arrays of (feature, threshold, left, right, value)."""

    def __init__(self, depth: int, min_leaf: int):
        self.depth, self.min_leaf = depth, min_leaf
        self.feat: List[int] = []
        self.thr: List[float] = []
        self.left: List[int] = []
        self.right: List[int] = []
        self.value: List[float] = []

    def _node(self, value) -> int:
        self.feat.append(-1)
        self.thr.append(0.0)
        self.left.append(-1)
        self.right.append(-1)
        self.value.append(float(value))
        return len(self.value) - 1

    def fit(self, X: np.ndarray, r: np.ndarray, cands: List[np.ndarray]):
        self._grow(X, r, np.arange(len(r)), 0, cands)
        self.feat_a = np.asarray(self.feat)
        self.thr_a = np.asarray(self.thr)
        self.left_a = np.asarray(self.left)
        self.right_a = np.asarray(self.right)
        self.value_a = np.asarray(self.value)
        return self

    def _grow(self, X, r, idx, depth, cands) -> int:
        node = self._node(r[idx].mean())
        if depth >= self.depth or len(idx) < 2 * self.min_leaf:
            return node
        best = None
        ri = r[idx]
        tot, n = ri.sum(), len(idx)
        base = tot * tot / n
        for f, thr in enumerate(cands):
            if len(thr) == 0:
                continue
            x = X[idx, f]
            le = x[:, None] <= thr[None, :]              # n x t
            cnt = le.sum(0)
            s = (ri[:, None] * le).sum(0)
            ok = (cnt >= self.min_leaf) & (n - cnt >= self.min_leaf)
            if not ok.any():
                continue
            c = np.where(ok, cnt, 1)
            gain = s * s / c + (tot - s) ** 2 / np.where(ok, n - cnt, 1) - base
            gain = np.where(ok, gain, -np.inf)
            j = int(np.argmax(gain))
            if gain[j] > 1e-12 and (best is None or gain[j] > best[0]):
                best = (gain[j], f, thr[j])
        if best is None:
            return node
        _, f, t = best
        mask = X[idx, f] <= t
        self.feat[node], self.thr[node] = f, float(t)
        self.left[node] = self._grow(X, r, idx[mask], depth + 1, cands)
        self.right[node] = self._grow(X, r, idx[~mask], depth + 1, cands)
        return node

    def predict(self, X: np.ndarray) -> np.ndarray:
        node = np.zeros(len(X), dtype=np.int64)
        for _ in range(self.depth + 1):
            f = self.feat_a[node]
            inner = f >= 0
            if not inner.any():
                break
            go_left = X[np.arange(len(X)), np.maximum(f, 0)] <= self.thr_a[node]
            nxt = np.where(go_left, self.left_a[node], self.right_a[node])
            node = np.where(inner, nxt, node)
        return self.value_a[node]


class GBDT:
    """Gradient-boosted regression trees (squared loss) in numpy."""

    def __init__(self, n_trees: int = 60, depth: int = 4, lr: float = 0.15, min_leaf: int = 2,
                 subsample: float = 0.8, seed: int = 0, max_thresholds: int = 32):
        self.n_trees, self.depth, self.lr = n_trees, depth, lr
        self.min_leaf, self.subsample, self.seed = min_leaf, subsample, seed
        self.max_thresholds = max_thresholds
        self.trees: List[_Tree] = []
        self.base = 0.0

    def _thresholds(self, X) -> List[np.ndarray]:
        out = []
        for f in range(X.shape[1]):
            u = np.unique(X[:, f])
            if len(u) < 2:
                out.append(np.empty(0))
                continue
            mids = (u[:-1] + u[1:]) / 2.0
            if len(mids) > self.max_thresholds:
                mids = np.quantile(mids, np.linspace(0, 1, self.max_thresholds))
            out.append(mids)
        return out

    def fit(self, X, y) -> "GBDT":
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError("GBDT.fit: X must be n x d and y of length n")
        rng = np.random.default_rng(self.seed)
        self.base = float(y.mean()) if len(y) else 0.0
        self.trees = []
        if len(y) < 2:
            return self
        cands = self._thresholds(X)
        pred = np.full(len(y), self.base)
        for _ in range(self.n_trees):
            r = y - pred
            if self.subsample < 1.0 and len(y) >= 8:
                idx = rng.choice(len(y), max(2, int(len(y) * self.subsample)), replace=False)
            else:
                idx = np.arange(len(y))
            t = _Tree(self.depth, self.min_leaf).fit(X[idx], r[idx], cands)
            self.trees.append(t)
            pred += self.lr * t.predict(X)
        return self

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        out = np.full(len(X), self.base)
        for t in self.trees:
            out += self.lr * t.predict(X)
        return out


class CostModel:
    """Scores candidates by predicted speed (higher = faster), trained on measurements."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.X: List[np.ndarray] = []
        self.y: List[float] = []
        self.model = None

    def update(self, features: Sequence[np.ndarray], times: Sequence[float]) -> None:
        """Add measurements (``times`` in seconds; ``inf`` for a failed candidate) and
        refit."""
        for f, t in zip(features, times):
            self.X.append(np.asarray(f, dtype=np.float64))
            self.y.append(float(t))
        good = [t for t in self.y if math.isfinite(t) and t > 0]
        if not good:
            self.model = None
            return
        worst = -math.log(max(good))
        target = np.array([-math.log(t) if math.isfinite(t) and t > 0 else worst - 1.0
                           for t in self.y])
        target -= target.mean()
        X = np.stack(self.X)
        if model_from_env() == "xgboost":
            try:
                import xgboost
            except ImportError:
                warnings.warn("TECOMP_COST_MODEL=xgboost, but xgboost cannot be imported: "
                              "the auto-scheduler uses tecomp's own trees (pip install "
                              "xgboost, or unset the variable)", RuntimeWarning, stacklevel=2)
            else:
                self.model = xgboost.XGBRegressor(n_estimators=60, max_depth=4,
                                                  learning_rate=0.15, subsample=0.8,
                                                  random_state=self.seed).fit(X, target)
                return
        self.model = GBDT(seed=self.seed).fit(X, target)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        if self.model is None or not len(features):
            return np.zeros(len(features))
        return np.asarray(self.model.predict(np.stack([np.asarray(f, dtype=np.float64)
                                                       for f in features])), dtype=np.float64)
