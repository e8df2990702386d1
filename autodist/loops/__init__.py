"""The kinds of training loop a user's script may run, each in one module, and the registry of them.

A kind is how a script trains: ``model.fit`` (:mod:`autodist.loops.fit`;
a model that overrides ``train_step`` is this kind, since Keras' fit calls
it), a ``tf.function`` step called from the script's own loop
(:mod:`autodist.loops.function`), or a ``tf.distribute`` strategy's
``scope``/``run`` around either (:mod:`autodist.loops.strategy`).  Each
module holds what the core knows of its kind:

- ``NAME``: the kind's name (a captured step's ``JobInfo.step`` where the
  kind captures steps);
- ``hook(handler)``: how its calls are intercepted, built from the patch
  primitives of :mod:`autodist.hooks` (every patch of Keras or TensorFlow
  stays discoverable there);
- ``capturing(session)``: the hook capture installs; it turns a call into
  a GraphItem and hands it to ``session.captured(item)`` (``session`` also
  gives ``model_name`` and ``step_source()``);
- ``probing(grab, source)``: the hook the profiling probe installs; it
  hands the step's function and the arguments of one call to
  ``grab(fn, args)`` (``source``: the script, named by errors).

:data:`KINDS` is the registry that capture (:func:`capturing`), the
profiling probe (:func:`probing`) and the launcher's runtime
(``launcher.runtime.loops``, one module per kind registered against the
same names) iterate over; none of them names a kind.  Adding a kind: a
module here, a module in ``launcher/runtime/loops/``, and a line in each
registry.
"""

from __future__ import annotations

import contextlib

from autodist.loops import fit, function, strategy

# Installed in this order (outermost first); a step's call reaches the first kind that claims it.
KINDS = (fit, function, strategy)


@contextlib.contextmanager
def every_kind(hooks):
    """Inside: every hook of ``hooks`` (context managers, one per kind) is installed; yields
    ``{kind name: what its hook yielded}``."""
    with contextlib.ExitStack() as stack:
        yield {kind.NAME: stack.enter_context(hook) for kind, hook in hooks}


def capturing(session):
    """Inside: every kind's calls are captured into ``session`` (see the module's docstring)."""
    return every_kind((kind, kind.capturing(session)) for kind in KINDS)


def probing(grab, source):
    """Inside: every kind's first step goes to ``grab(fn, args)`` (see the module's docstring)."""
    return every_kind((kind, kind.probing(grab, source)) for kind in KINDS)
