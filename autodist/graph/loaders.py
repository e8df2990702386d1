"""Load a step from a file: graph.json, a GraphDef (.pb/.pbtxt) or a SavedModel."""

from __future__ import annotations

import os

from autodist.errors import CaptureError, InputError, first_line
from autodist.graph.analysis import analyse_variables, assign_phases
from autodist.graph.checks import check_graph_document
from autodist.graph.item import GraphItem, JobInfo
from autodist.graph.loops import attach, loop_records
from autodist.graph.tfgraph import inlined_graph, op_infos, variable_facts

GRAPH_DEF_SUFFIXES = (".pb", ".pbtxt")


def load_graph(path):
    """Read a step from a file.

    Parameters
    ----------
    path : str or path-like
        ``*.json`` (a saved GraphItem), ``*.pb`` / ``*.pbtxt`` (a GraphDef),
        or a SavedModel directory.

    Returns
    -------
    GraphItem
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
            return _load_saved_model(path)
        raise CaptureError("directory is not a SavedModel (no saved_model.pb)", source=path)
    if not os.path.exists(path):
        raise InputError("no such file", source=path)
    if path.endswith(".json"):
        return GraphItem.load(path)
    if path.endswith(GRAPH_DEF_SUFFIXES):
        return _load_graph_def(path)
    raise CaptureError("unknown graph file type (expected .json, .pb, .pbtxt or a SavedModel directory)", source=path)


def _parse_graph_def(path):
    from google.protobuf import message, text_format
    from tensorflow.core.framework import graph_pb2

    graph_def = graph_pb2.GraphDef()
    try:
        if path.endswith(".pbtxt"):
            with open(path, encoding="utf-8") as fh:
                text_format.Parse(fh.read(), graph_def)
        else:
            with open(path, "rb") as fh:
                graph_def.ParseFromString(fh.read())
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise CaptureError(f"not a valid GraphDef ({first_line(exc)})", source=path) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=path) from None
    if not graph_def.node:
        raise CaptureError("GraphDef has no nodes", source=path)
    return graph_def


def _import(graph_def, source):
    import tensorflow as tf

    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except (ValueError, tf.errors.OpError) as exc:
        raise CaptureError(f"GraphDef does not import ({first_line(exc)})", source=source) from None
    return graph


def _graph_variables(graph, ops, source, known=None):
    """Variable facts by handle op: VarHandleOp/VariableV2 nodes and resource placeholders.

    ``known`` maps a handle op name to facts taken from a live variable.  For
    the others the shape comes from the node (or its ReadVariableOp) and a
    variable counts as trainable when the model (a forward op) reads it.
    """
    known = known or {}
    handles = {}
    for op in graph.get_operations():
        if op.name in known:
            handles[op.name] = known[op.name]
            continue
        if op.type in ("VarHandleOp", "VariableV2"):
            dtype = op.get_attr("dtype")
            shape = op.get_attr("shape")
            name = op.get_attr("shared_name").decode() if op.type == "VarHandleOp" else ""
            name = name or op.name
        elif op.type == "Placeholder" and op.get_attr("dtype").name == "resource":
            reads = [c for c in op.outputs[0].consumers() if c.type == "ReadVariableOp"]
            if not reads:
                continue
            dtype, shape, name = reads[0].outputs[0].dtype, reads[0].outputs[0].shape, op.name
        else:
            continue
        if shape.rank is None or not shape.is_fully_defined():
            raise CaptureError(
                f"shape of variable {name!r} is unknown (write the GraphDef with "
                "as_graph_def(add_shapes=True))",
                source=source,
            )
        dims = [int(d) for d in shape.as_list()]
        readers = [c.name for c in op.outputs[0].consumers()]
        if op.type == "VariableV2":  # a ref variable is read through Identity ops
            readers += [c.name for r in op.outputs[0].consumers() for c in r.outputs[0].consumers()]
        handles[op.name] = {
            "name": name,
            "shape": dims,
            "dtype": dtype.name,
            "bytes": _count(dims) * dtype.size,
            "trainable": any(ops[r].phase == "forward" for r in readers if r in ops),
        }
    return handles


def _count(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _item(graph, path, source, model_name, known=None):
    import tensorflow as tf

    ops = {op.name: op for op in op_infos(graph)}
    assign_phases(ops)
    loops = loop_records(graph)
    attach(list(ops.values()), loops)
    has_gradients = any(op.phase == "backward" for op in ops.values())
    handles = _graph_variables(graph, ops, path, known)
    note = "" if has_gradients else " (no gradients in the graph: forward only)"
    job = JobInfo(model_name=model_name, tf_version=tf.__version__, source=f"{source}{note}")
    _fill_inputs(graph, job)
    item = GraphItem(list(ops.values()), analyse_variables(ops, handles), job, loops)
    check_graph_document(item.to_dict(), path)
    return item


def _fill_inputs(graph, job):
    """Input shapes (non-resource placeholders) and the batch size they agree on."""
    for op in graph.get_operations():
        if op.type == "Placeholder" and op.get_attr("dtype").name != "resource":
            shape = op.outputs[0].shape
            if shape.rank is not None:
                job.input_shapes[op.name] = [-1 if d is None else int(d) for d in shape.as_list()]
    for shape in job.input_shapes.values():
        if shape and shape[0] > 0:
            job.batch_size = shape[0]
            break


def _load_graph_def(path):
    graph_def = _parse_graph_def(path)
    name = os.path.splitext(os.path.basename(path))[0]
    return _item(_import(graph_def, path), path, f"graphdef:{path}", name)


def _load_saved_model(path):
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(path)
    except Exception as exc:  # TF raises many types for a broken SavedModel
        raise CaptureError(f"cannot load SavedModel ({first_line(exc)})", source=path) from None
    signatures = dict(loaded.signatures)
    if not signatures:
        raise CaptureError("SavedModel has no signatures", source=path)
    key = next((k for k in ("train", "train_step", "serving_default") if k in signatures), sorted(signatures)[0])
    concrete = signatures[key]
    variables = {id(v.handle): v for v in _tracked_variables(loaded)}
    known = {}
    for external, internal in concrete.graph.captures:
        if id(external) in variables:
            known[internal.op.name] = variable_facts(variables[id(external)])
    name = os.path.basename(os.path.normpath(path))
    return _item(inlined_graph(concrete, known), path, f"savedmodel:{path} signature {key}", name, known)


def _tracked_variables(root):
    import tensorflow as tf

    view = tf.train.TrackableView(root)
    return [obj for obj in view.descendants() if isinstance(obj, tf.Variable)]
