"""The learned op-time regressor (scikit-learn estimator conventions).

Gradient boosting over the design matrix of cost_models.features (column 0
is the op type, a category) on log10 of the op's time over its roofline
estimate: trees cannot extrapolate, so learning the ratio lets an op larger
than any measured one scale with its FLOPs and bytes.  Ops that ran no
kernel when measured (folded constants, reshapes, ops fused into a
neighbour) train a per-type kernel rate, and a prediction is the expected
time: rate times the kernel's predicted time.  Persisted as a
pickle next to a JSON metadata file holding the scikit-learn version, the
feature list, the parameters and a description of the training data; a
pickle from another scikit-learn version is not trusted and the model is
refitted from the shipped data instead (see cost_models.model).
"""

from __future__ import annotations

import pickle

import numpy as np
import sklearn
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from autodist.errors import CostModelError
from autodist.io import read_json, write_bytes_atomic, write_json_atomic
from cost_models.features import FEATURES

FORMAT = "autodist.op_time_model"
VERSION = 3
ESTIMATORS = ("hist", "gbr")
TARGETS = ("roofline_ratio", "seconds")
# Added to the roofline before taking the ratio, so that ops with next to no
# work (a scalar add) have a finite ratio: about one kernel launch on a CPU.
RATIO_FLOOR_SECONDS = 1e-6
_ROOFLINE_COLUMN = FEATURES.index("log_roofline_seconds")


class OpTimeRegressor(RegressorMixin, BaseEstimator):
    """Predicts an op's seconds from its features.

    Parameters
    ----------
    estimator : {"hist", "gbr"}, default="hist"
        ``HistGradientBoostingRegressor`` (op type as a native category) or
        ``GradientBoostingRegressor`` (op type as an ordinal code).
    max_iter : int, default=200
        Boosting iterations.
    learning_rate : float, default=0.1
    max_leaf_nodes : int, default=31
    min_samples_leaf : int, default=20
        Fewest fitted rows per leaf.  Small groups of like ops (a handful of
        1M-row table copies) need small leaves to be fitted, not averaged
        with their neighbours.
    random_state : int, default=0
    n_threads : int, default=1
        OpenMP threads for fit and predict.  One by default: the models are
        small, and on cores shared with other jobs OpenMP threads spin-wait
        (a 1,500-row fit took 18 s with 2 threads, 0.2 s with 1, measured here).
    target : {"roofline_ratio", "seconds"}, default="roofline_ratio"
        What the trees learn: log10(seconds / (roofline + 1 us)), or
        log10(seconds) itself.

    Attributes
    ----------
    op_types_ : list of str
        Op types seen with a kernel time in fit, in code order.
    kernel_rate_ : dict of str -> float
        Per op type seen in fit, the fraction of its rows that ran a kernel.
    estimator_ : the fitted scikit-learn regressor.
    n_features_in_ : int
    """

    def __init__(self, estimator="hist", max_iter=200, learning_rate=0.1, max_leaf_nodes=31, min_samples_leaf=20,
                 random_state=0, n_threads=1, target="roofline_ratio"):
        self.estimator = estimator
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.n_threads = n_threads
        self.target = target

    def _scale(self, Z):
        """Seconds per unit of the learned target (1 for ``"seconds"``)."""
        if self.target == "seconds":
            return np.ones(len(Z))
        return 10.0 ** Z[:, _ROOFLINE_COLUMN] + RATIO_FLOOR_SECONDS

    def _encode(self, X):
        X = np.asarray(X, dtype=object)
        if X.ndim != 2 or X.shape[1] != len(FEATURES):
            raise ValueError(f"X must have shape (n, {len(FEATURES)}) with columns {FEATURES}, got {X.shape}")
        codes = {t: float(i) for i, t in enumerate(self.op_types_)}
        missing = np.nan if self.estimator == "hist" else -1.0
        out = np.empty(X.shape, dtype=np.float64)
        out[:, 0] = [codes.get(t, missing) for t in X[:, 0]]
        out[:, 1:] = X[:, 1:].astype(np.float64)
        return out

    def fit(self, X, y):
        """Fit on features ``X`` and measured seconds ``y``.

        ``y`` holds positive seconds, or NaN for an op that ran no kernel
        (it counts towards its type's kernel rate only).
        """
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1 or len(y) != len(X) or len(y) == 0:
            raise ValueError("y must be a non-empty 1-d array as long as X")
        ran = ~np.isnan(y)
        if not ran.any() or not np.all(np.isfinite(y[ran])) or np.any(y[ran] <= 0):
            raise ValueError("y must hold positive finite seconds (NaN for ops that ran no kernel), some timed")
        X = np.asarray(X, dtype=object)
        all_types, inverse = np.unique(X[:, 0].astype(str), return_inverse=True)
        rates = np.bincount(inverse, weights=ran) / np.bincount(inverse)
        self.kernel_rate_ = {str(t): float(r) for t, r in zip(all_types, rates)}
        X, y = X[ran], y[ran]
        types, counts = np.unique(X[:, 0].astype(str), return_counts=True)
        # HistGradientBoosting takes at most 255 categories: keep the most
        # frequent types, the rest count as unseen.
        keep = sorted(types[np.argsort(-counts, kind="stable")[:250]])
        self.op_types_ = [str(t) for t in keep]
        Z = self._encode(X)
        if self.estimator == "hist":
            from sklearn.ensemble import HistGradientBoostingRegressor

            # No early stopping: it would hold a random tenth of the rows out of the fit.
            model = HistGradientBoostingRegressor(
                max_iter=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=self.min_samples_leaf,
                early_stopping=False,
                categorical_features=[0],
                random_state=self.random_state,
            )
        else:
            from sklearn.ensemble import GradientBoostingRegressor

            model = GradientBoostingRegressor(
                n_estimators=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=self.min_samples_leaf,
                random_state=self.random_state,
            )
        with threadpool_limits(self.n_threads):
            self.estimator_ = model.fit(Z, np.log10(y / self._scale(Z)))
        self.n_features_in_ = Z.shape[1]
        return self

    def predict(self, X, ran_kernel=False):
        """Predicted seconds per row of ``X``.

        The expected time (kernel rate times the kernel's time), or with
        ``ran_kernel=True`` the kernel's time given that one ran.
        """
        check_is_fitted(self, "estimator_")
        if len(X) == 0:
            return np.zeros(0)
        Z = self._encode(X)
        with threadpool_limits(self.n_threads):
            seconds = 10.0 ** self.estimator_.predict(Z) * self._scale(Z)
        if ran_kernel:
            return seconds
        return seconds * self.kernel_rates(np.asarray(X, dtype=object)[:, 0])

    def kernel_rates(self, op_types):
        """Per op type, the fraction of its fitted rows that ran a kernel (1 for types not seen in fit)."""
        check_is_fitted(self, "estimator_")
        return np.array([self.kernel_rate_.get(t, 1.0) for t in op_types], dtype=np.float64)

    def knows(self, op_types):
        """Boolean mask: which ``op_types`` were seen in fit (timed or not)."""
        check_is_fitted(self, "estimator_")
        return np.array([t in self.kernel_rate_ for t in op_types], dtype=bool)


def save_model(model, path_pickle, path_meta, training_data):
    """Pickle ``model`` and write its metadata (version, features, data)."""
    check_is_fitted(model, "estimator_")
    write_bytes_atomic(path_pickle, pickle.dumps(model, protocol=4))
    write_json_atomic(path_meta, model_metadata(model, training_data))


def model_metadata(model, training_data):
    return {
        "format": FORMAT,
        "version": VERSION,
        "sklearn_version": sklearn.__version__,
        "features": list(FEATURES),
        "params": model.get_params(),
        "op_types": list(model.op_types_),
        "kernel_rates": dict(sorted(model.kernel_rate_.items())),
        "training_data": training_data,
    }


def load_model(path_pickle, path_meta):
    """Load a pickled model whose metadata matches this environment.

    Raises
    ------
    CostModelError
        When the metadata's format, version, feature list or scikit-learn
        version differs (the caller refits from data), or the pickle is bad.
    """
    meta = read_json(path_meta)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CostModelError("not an op time model of this version", source=path_meta)
    if meta.get("features") != list(FEATURES):
        raise CostModelError("feature list differs from this autodist's", source=path_meta, field="features")
    if meta.get("sklearn_version") != sklearn.__version__:
        raise CostModelError(
            f"pickled with scikit-learn {meta.get('sklearn_version')}, running {sklearn.__version__}",
            source=path_meta,
            field="sklearn_version",
        )
    try:
        with open(path_pickle, "rb") as fh:
            model = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
        raise CostModelError(f"cannot load ({exc})", source=path_pickle) from None
    if not isinstance(model, OpTimeRegressor):
        raise CostModelError("does not hold an OpTimeRegressor", source=path_pickle)
    return model, meta
