"""The kernels cuDNN runs for a Keras LSTM or GRU on a GPU, where the capture host traced the layer's loop.

On a GPU, Keras' TensorFlow backend runs an LSTM or GRU whose arguments
cuDNN supports as one ``CudnnRNNV3`` op (keras/src/backend/tensorflow/rnn.py,
``lstm`` and ``gru``; the layers the capture lists in
``JobInfo.cudnn_rnns``), and its gradient as another; on a CPU-only host it
runs the cell one time step at a time in a ``While`` loop, which is what
capture records.  cuDNN's standard algorithm (``CUDNN_RNN_ALGO_STANDARD``,
the one TensorFlow asks for) does the same products in two kinds of
kernels: the products that do not wait for the previous time step (the
input projection, the input gradient and both weight gradients) as one
GEMM each over the whole sequence, and, per time step, only the product on
the recurrence (the state times the recurrent kernel forward, the gates'
gradient times its transpose backward) and one pointwise kernel for the
cell's gates.

:func:`cudnn_kernels` turns a loop's body into those kernels, as ops the
GPU kernel model prices like any other (cost_models.gpu): a product is on
the recurrence when it sits on a cycle of the iteration's dataflow through
the loop's back edges (``NextIteration`` to ``Merge``).  No published figure
of the calibration set is an RNN: the products' efficiencies and the launch
cost are the ones fitted on the other models.
"""

from __future__ import annotations

import re
from dataclasses import replace

import networkx as nx

from autodist.graph.item import GraphItem, OpInfo
from cost_models.prior import OP_CLASS

# A name's uniquifying suffixes ("forward_lstm_1_1" is "forward_lstm" twice made unique, by Keras or TensorFlow).
_UNIQUIFIED = re.compile(r"(_\d+)+$")
# The bytes cuDNN's pointwise kernel moves per time step, in recurrent products' outputs: it reads the gates'
# recurrent and input parts and writes as much again (the new states, and what the gradient keeps).
POINTWISE_PER_GATE_BYTE = 3


def _layer_of(loop_op):
    """The layer name scope a Keras recurrent loop (``.../forward_lstm_1/while``, or its gradient
    ``.../forward_lstm_1/while_grad``) runs in, without uniquifying suffixes."""
    parts = loop_op.split("/")
    return _UNIQUIFIED.sub("", parts[-2]) if len(parts) > 1 else ""


def cudnn_rnn_loops(graph_item):
    """Names of the step's (top-level) loop ops that are a cuDNN layer's time steps or their gradient: the loops in
    the name scope of a layer of ``graph_item.job.cudnn_rnns``, lowered as TensorFlow lowers them outside XLA."""
    layers = {_UNIQUIFIED.sub("", name) for name in graph_item.job.cudnn_rnns}
    return {name for name, loop in graph_item.loops.items() if loop.lowered and _layer_of(loop.op) in layers}


def recurrent_ops(loop):
    """Names of the ops of ``loop``'s iteration (a lowered LoopInfo) on a cycle through its back edges: what waits
    for the previous iteration and what the next one waits for."""
    names = {op.name for op in loop.ops}
    graph = nx.DiGraph()
    prefix = f"{loop.op}/iteration/"
    for op in loop.ops:
        graph.add_node(op.name)
        graph.add_edges_from((t.rpartition(":")[0], op.name) for t in op.data_inputs if t.rpartition(":")[0] in names)
        if op.type == "NextIteration" and op.name.startswith(f"{prefix}NextIteration_"):
            graph.add_edge(op.name, f"{prefix}Merge_{op.name.rpartition('_')[2]}")
    return {name for component in nx.strongly_connected_components(graph) if len(component) > 1
            for name in component}


def cudnn_kernels(loop, body, job):
    """What cuDNN runs for ``loop`` (a cuDNN layer's LoopInfo; ``body`` its iteration as a GraphItem), as a
    GraphItem of ``job``, and the names of its ops that run once per time step (the rest run once per step).

    Each product of the iteration is a kernel: per time step where it is on the recurrence, else once with the
    FLOPs and bytes of every time step.  Per time step, one pointwise kernel stands for the cell's gates.  A
    kernel's operands are not ops of the item, so its bytes (operands and result) are recorded as its output.
    """
    on_cycle = recurrent_ops(loop)
    products = [op for op in loop.ops if OP_CLASS.get(op.type) == "matmul"]
    kernels, per_step = [], set()
    for op in products:
        moved = sum(body.tensor_bytes(t) for t in op.data_inputs) + op.total_output_bytes
        times = 1 if op.name in on_cycle else loop.trips
        kernels.append(replace(op, name=f"{op.name}/cudnn", inputs=[], flops=op.flops * times,
                               output_bytes=[moved * times], colocation=[]))
        if op.name in on_cycle:
            per_step.add(kernels[-1].name)
    gates = [k for k in kernels if k.name in per_step]
    if gates:
        gate_bytes = sum(op.total_output_bytes for op in products if op.name in on_cycle)
        kernels.append(OpInfo(name=f"{loop.op}/cudnn/pointwise", type="Mul", inputs=[f"{k.name}:0" for k in gates],
                              output_shapes=gates[0].output_shapes, output_dtypes=gates[0].output_dtypes,
                              output_bytes=[POINTWISE_PER_GATE_BYTE * gate_bytes], phase=loop.ops[0].phase))
        per_step.add(kernels[-1].name)
    # What reads the kernels' results (the layer's outputs), so that none is pruned as unread (runs no kernel).
    kernels.append(OpInfo(name=f"{loop.op}/cudnn/outputs", type="Identity", inputs=[f"{k.name}:0" for k in kernels],
                          output_shapes=[[]], output_dtypes=["float32"], output_bytes=[0]))
    return GraphItem(kernels, [], job), per_step
