"""Op groups of a replica that spans several devices: each Keras layer runs on its group's device.

The plan places op groups, which are name scopes of the captured step (e.g.
``small_mlp_1/hidden_1``); at run time the same ops are built again by the
model's layers.  A layer's group is the scope named after it: the first
path component that is the layer's name, or its name with the ``_N`` suffix
TensorFlow adds when a scope name repeats.  The layer's forward ops run on
its group's device and their gradients follow them (the tape colocates
gradient ops with the ops they differentiate).
"""

from __future__ import annotations

import contextlib
import re

SCOPE_SUFFIX = re.compile(r"_\d+$")


def layer_slots(layer_names, group_slots):
    """Layer name -> slot of the replica's devices, for the layers that some op group names.

    A layer named by several groups takes the slot of the shortest (its own
    scope rather than one of its inner ops).
    """
    names = set(layer_names)
    out, own = {}, set()
    for group, slot in sorted(group_slots.items()):
        parts = group.split("/")
        for i, part in enumerate(parts):
            name = part if part in names else SCOPE_SUFFIX.sub("", part)
            if name in names:
                if name not in own:
                    out[name] = slot
                    if i == len(parts) - 1:
                        own.add(name)
                break
    return out


@contextlib.contextmanager
def layers_on_devices(model, devices, group_slots):
    """Inside: calling a top-level layer of ``model`` builds its ops on its group's device."""
    import tensorflow as tf

    from autodist.hooks import layer_calls

    slots = layer_slots([layer.name for layer in model.layers], group_slots)
    targets = {id(layer): devices[slots[layer.name]] for layer in model.layers if slots.get(layer.name, 0)}

    def call(original, layer, args, kwargs):
        device = targets.get(id(layer))
        if device is None:
            return original(layer, *args, **kwargs)
        with tf.device(device):
            return original(layer, *args, **kwargs)

    with layer_calls(call):
        yield slots
