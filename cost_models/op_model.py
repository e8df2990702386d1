"""The learned op-time regressor (scikit-learn estimator conventions).

Gradient boosting on log10(seconds) over the design matrix of
cost_models.features (column 0 is the op type, a category).  Persisted as a
pickle next to a JSON metadata file holding the scikit-learn version, the
feature list, the parameters and a description of the training data; a
pickle from another scikit-learn version is not trusted and the model is
refitted from the shipped data instead (see cost_models.model).
"""

from __future__ import annotations

import os
import pickle
import tempfile

import numpy as np
import sklearn
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from autodist.errors import CostModelError
from autodist.io import read_json, write_json_atomic
from cost_models.features import FEATURES

FORMAT = "autodist.op_time_model"
VERSION = 1
ESTIMATORS = ("hist", "gbr")


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
    random_state : int, default=0
    n_threads : int, default=1
        OpenMP threads for fit and predict.  One by default: the models are
        small, and on cores shared with other jobs OpenMP threads spin-wait
        (a 1,500-row fit took 18 s with 2 threads, 0.2 s with 1, measured here).

    Attributes
    ----------
    op_types_ : list of str
        Op types seen in fit, in code order.
    estimator_ : the fitted scikit-learn regressor.
    n_features_in_ : int
    """

    def __init__(self, estimator="hist", max_iter=200, learning_rate=0.1, max_leaf_nodes=31, random_state=0,
                 n_threads=1):
        self.estimator = estimator
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.random_state = random_state
        self.n_threads = n_threads

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
        """Fit on features ``X`` and measured seconds ``y`` (all > 0)."""
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1 or len(y) != len(X) or len(y) == 0:
            raise ValueError("y must be a non-empty 1-d array as long as X")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("y must hold positive finite seconds")
        X = np.asarray(X, dtype=object)
        types, counts = np.unique(X[:, 0].astype(str), return_counts=True)
        # HistGradientBoosting takes at most 255 categories: keep the most
        # frequent types, the rest count as unseen.
        keep = sorted(types[np.argsort(-counts, kind="stable")[:250]])
        self.op_types_ = [str(t) for t in keep]
        Z = self._encode(X)
        if self.estimator == "hist":
            from sklearn.ensemble import HistGradientBoostingRegressor

            model = HistGradientBoostingRegressor(
                max_iter=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                categorical_features=[0],
                random_state=self.random_state,
            )
        else:
            from sklearn.ensemble import GradientBoostingRegressor

            model = GradientBoostingRegressor(
                n_estimators=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                random_state=self.random_state,
            )
        with threadpool_limits(self.n_threads):
            self.estimator_ = model.fit(Z, np.log10(y))
        self.n_features_in_ = Z.shape[1]
        return self

    def predict(self, X):
        """Predicted seconds per row of ``X``."""
        check_is_fitted(self, "estimator_")
        if len(X) == 0:
            return np.zeros(0)
        Z = self._encode(X)
        with threadpool_limits(self.n_threads):
            return 10.0 ** self.estimator_.predict(Z)

    def knows(self, op_types):
        """Boolean mask: which ``op_types`` were seen in fit."""
        check_is_fitted(self, "estimator_")
        seen = set(self.op_types_)
        return np.array([t in seen for t in op_types], dtype=bool)


def save_model(model, path_pickle, path_meta, training_data):
    """Pickle ``model`` and write its metadata (version, features, data)."""
    check_is_fitted(model, "estimator_")
    folder = os.path.dirname(os.path.abspath(path_pickle))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(model, fh, protocol=4)
        os.replace(tmp, path_pickle)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    write_json_atomic(path_meta, model_metadata(model, training_data))


def model_metadata(model, training_data):
    return {
        "format": FORMAT,
        "version": VERSION,
        "sklearn_version": sklearn.__version__,
        "features": list(FEATURES),
        "params": model.get_params(),
        "op_types": list(model.op_types_),
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
