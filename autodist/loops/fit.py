"""Keras ``model.fit``: the loop Keras runs, calling the model's ``train_step`` (its own, or one the model
overrides) on each batch."""

from __future__ import annotations

import contextlib

from autodist import hooks
from autodist.errors import CaptureError
from autodist.graph.batch import first_batch
from autodist.graph.input_pipeline import host_op_types
from autodist.graph.item import ONE_CLIENT_FIT_ARGS
from autodist.graph.trace import shapes_of, spec_of, trace_step

NAME = "fit"

# How its calls are intercepted: ``model.fit(*args, **kwargs)`` is ``handler(model, *args, **kwargs)``.
hook = hooks.keras_fit


@contextlib.contextmanager
def _without_loss_scaling(model):
    """Trace ``model``'s step with the optimizer a ``LossScaleOptimizer`` wraps, if it has one.

    Keras compiles ``mixed_float16`` models with a LossScaleOptimizer, whose
    update runs inside a ``tf.cond`` (skip the step on overflow): a branch
    function whose ops a capture cannot see, variable updates included.  The
    step captured with the inner optimizer has the same forward, backward and
    update ops; it lacks the loss scale's finiteness check and unscaling, two
    elementwise passes over the gradients.
    """
    import keras

    wrapper = model.optimizer
    if isinstance(wrapper, keras.optimizers.LossScaleOptimizer):
        model.optimizer = wrapper.inner_optimizer
    try:
        yield
    finally:
        model.optimizer = wrapper


def keras_jit_facts(model, asked=None):
    """The JobInfo fields that say how Keras compiles ``model``'s step (autodist.graph.xla): ``asked`` is the
    ``jit_compile`` its ``compile`` call asked for (None: not seen, the model's own setting)."""
    from keras.src.trainers.trainer import model_supports_jit

    asked = model.jit_compile if asked is None else asked
    strategy = getattr(model, "_distribute_strategy", None)
    return {"jit_compile": "auto" if asked == "auto" else ("on" if asked else "off"),
            "jit_supported": bool(model_supports_jit(model)),
            "distribute_strategy": type(strategy).__name__ if strategy is not None else "",
            "cudnn_rnns": [layer.name for layer in model._flatten_layers() if _runs_on_cudnn(layer)]}


def _runs_on_cudnn(layer):
    """Whether ``layer`` is a Keras LSTM or GRU that runs on cuDNN where a GPU is visible.

    Keras decides it when the layer is built (``LSTM.__init__``, ``GRU.__init__``: the cell's activations, bias,
    unroll and, for a GRU, ``reset_after``, as ``backend.cudnn_ok`` checks them, and ``use_cudnn``), and then
    marks the layer as not supporting XLA; on a host without a GPU it does neither, so the check is made here
    without the GPU.
    """
    import keras

    if not isinstance(layer, (keras.layers.LSTM, keras.layers.GRU)) or layer.use_cudnn not in (True, "auto"):
        return False
    from keras.src.backend.tensorflow.rnn import _do_gru_arguments_support_cudnn, _do_lstm_arguments_support_cudnn

    cell = layer.cell
    if isinstance(layer, keras.layers.GRU):
        return _do_gru_arguments_support_cudnn(cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias,
                                               cell.reset_after)
    return _do_lstm_arguments_support_cudnn(cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias)


def step_item(model, x, y, batch_size, sample_weight, model_name, source, jit_compile=None):
    """The GraphItem of the step ``model.fit(x, y, batch_size, sample_weight=...)`` would run (traced, not run);
    ``jit_compile``: what the model's ``compile`` asked for (see :func:`keras_jit_facts`)."""
    import tensorflow as tf

    if getattr(model, "optimizer", None) is None:
        raise CaptureError("model.fit was called on a model that is not compiled", source=source)
    data, names = first_batch(x, y, sample_weight, batch_size, source=source)
    specs = tf.nest.map_structure(spec_of, data)
    shapes = {n: shapes_of(s) for n, s in zip(names, specs if isinstance(specs, tuple) else (specs,))}
    # a part of unknown shape (a pandas DataFrame) is left out, as shapes_of leaves out a nested one
    shapes = {n: s for n, s in shapes.items() if s is not None}
    traced = tf.function(model.train_step)
    try:
        with _without_loss_scaling(model):
            item = trace_step(traced, (specs,), {}, model_name, source, optimizer=type(model.optimizer).__name__,
                              input_shapes=shapes, step=NAME, xla=model.jit_compile,
                              jit=keras_jit_facts(model, jit_compile))
    except CaptureError:
        _refuse_untrained(model, source)  # the cause, where it is (the trace built the model)
        raise
    _refuse_untrained(model, source)
    item.job.custom_train_step = custom_train_step(model)
    return item


def custom_train_step(model):
    """The class (``module.Name``) whose ``train_step`` Keras' fit runs for ``model`` where it is not Keras' own
    (a GAN's, a step with extra loss terms); "" where it is Keras'."""
    for cls in type(model).__mro__:
        if "train_step" in vars(cls):
            return "" if cls.__module__.split(".")[0] == "keras" else f"{cls.__module__}.{cls.__qualname__}"
    return ""


def _refuse_untrained(model, source):
    """Raise CaptureError where ``model`` has no trainable weight Keras tracks: its fit trains nothing (Keras warns
    "The model does not have any trainable weights" and fits on), so there is nothing to distribute."""
    if not model.trainable_weights:
        raise CaptureError(f"model.fit trains nothing: Keras tracks no trainable weight of model {model.name!r} "
                           "(Keras 3 does not track a tf.Variable set as a model's or layer's attribute: create it "
                           "with self.add_weight)", source=source)


@contextlib.contextmanager
def capturing(session):
    """Inside: a ``model.fit`` call is captured (its step traced, with the ``jit_compile`` the model's ``compile``
    asked for, before Keras resolves "auto" for this host) and the fit arguments that only Keras' own loop runs."""
    asked = {}  # id of a compiled model -> the jit_compile its compile call asked for

    def record_compile(model, jit_compile):
        asked[id(model)] = jit_compile

    def fit(model, x=None, y=None, batch_size=None, *args, sample_weight=None, **kwargs):
        import tensorflow as tf

        item = step_item(model, x, y, batch_size, sample_weight, session.model_name, session.step_source(),
                         asked.get(id(model)))
        given = dict(kwargs, sample_weight=sample_weight)
        in_data = "sample_weight" in item.job.input_shapes  # a dataset of (x, y, sample_weight)
        item.job.fit_arguments = [a for a in ONE_CLIENT_FIT_ARGS
                                  if given.get(a) is not None or (a == "sample_weight" and in_data)]
        if isinstance(x, tf.data.Dataset):
            item.job.input_pipeline = host_op_types(x)
        session.captured(item)

    with hook(fit), hooks.keras_compile(record_compile):
        yield


def probing(grab, source):
    """Inside: a ``model.fit`` call gives the probe ``tf.function(model.train_step)`` and its first batch (a bad
    batch is an error naming ``source``, the script)."""

    def fit(model, x=None, y=None, batch_size=None, *args, sample_weight=None, **kwargs):
        import tensorflow as tf

        data, _ = first_batch(x, y, sample_weight, batch_size, source=source)
        grab(tf.function(model.train_step), (tf.nest.map_structure(tf.convert_to_tensor, data),))

    return hook(fit)
