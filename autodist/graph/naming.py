"""The names a GraphItem, a plan, a report and the runtime give a step's variables: the model's own.

A Keras 3 variable is named by its ``path`` (``my_model/dense_1/kernel``),
unique within a program because Keras makes layer names unique; the
``tf.Variable`` behind it carries only the name of its innermost scope
(``my_model/kernel``, the same for every kernel of a subclassed model), so
that name is never used for it.  A raw ``tf.Variable`` keeps its own name
(``:0`` dropped).  The names of one step must be unique: a capture with two
variables of one name is refused.
"""

from __future__ import annotations

import gc

from autodist.errors import CaptureError


def _raw_name(var):
    return var.name[:-2] if var.name.endswith(":0") else var.name


def variable_name(var):
    """The name of a live variable: a Keras variable's path, a ``tf.Variable``'s name."""
    path = getattr(var, "path", None)
    return path if path is not None else _raw_name(var)


def keras_variables(variables):
    """``{id(tf.Variable): Keras variable}`` for those of ``variables`` that back a Keras 3 variable.

    The Keras variables are found among the program's live objects (a Keras
    variable holds its ``tf.Variable``; the reverse link does not exist).
    """
    import keras

    wanted = {id(v) for v in variables}
    found = {}
    for obj in gc.get_objects():
        if isinstance(obj, keras.Variable):
            inner = vars(obj).get("_value")
            if inner is not None and id(inner) in wanted:
                found[id(inner)] = obj
    return found


def step_variables(variables, source=""):
    """``{id(variable): (name, trainable)}`` for the variables a traced step captures, each name unique.

    A Keras variable's ``trainable`` is Keras' (a frozen layer's weights
    are not trainable, while their ``tf.Variable``s still say they are).
    Raises CaptureError naming the first name two variables share.
    """
    keras_vars = keras_variables(variables)
    out, owner = {}, {}
    for var in variables:
        outer = keras_vars.get(id(var))
        name = outer.path if outer is not None else _raw_name(var)
        if name in owner and owner[name] is not var:
            raise CaptureError(f"two variables of the step are both named {name!r}; give each tf.Variable its own "
                               "name (tf.Variable(..., name=...))", source=source)
        owner[name] = var
        out[id(var)] = (name, bool((outer if outer is not None else var).trainable))
    return out
