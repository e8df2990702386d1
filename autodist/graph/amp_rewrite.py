"""TensorFlow's automatic mixed precision graph rewrite, applied at capture as a GPU would apply it.

A script can train a float32 graph under Grappler's ``auto_mixed_precision``
pass (``tf.config.optimizer.set_experimental_options({"auto_mixed_precision":
True})``; NVIDIA's TensorFlow 1 examples turn it on with ``--amp``).  On a
GPU, TensorFlow rewrites the step before it runs: matrix products and
convolutions run in float16; ops between them that TensorFlow's lists allow
follow; ops its deny list names (``Mean``, ``Pow``, ``Softmax``, ``Exp``,
``Sum``, ...) and what they feed up to the next product stay in float32; and
``Cast`` ops convert at every boundary.  This is not what Keras'
``mixed_float16`` policy computes (a layer norm, a tanh GELU and a softmax stay
float32 here), so the step is priced on the rewritten graph.

The pass runs only on ops placed on a GPU of compute capability 7.0 or more.
Capture has no GPU: it places every op on a virtual Volta GPU of a Grappler
cluster, runs the pass alone, and tells TensorFlow not to require a real GPU
(``TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_IGNORE_PERFORMANCE``, which the pass
reads once per process, so it is set when capture starts).
"""

from __future__ import annotations

import os

from autodist.errors import CaptureError

IGNORE_PERFORMANCE = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_IGNORE_PERFORMANCE"
# The name the pass gives the Cast ops it inserts ends with this.
CAST_SUFFIX = "-AutoMixedPrecision"
# Ops the pass always runs in float16 (its allow list's matrix products and convolutions).
PRODUCTS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv3D", "Conv2DBackpropInput",
            "Conv2DBackpropFilter")
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
# The pass leaves the graph alone on a GPU below compute capability 7.0 (auto_mixed_precision.cc, kMinGPUArch = {7, 0}):
# of the architectures autodist knows, Pascal's (6.0, 6.1).
SKIPPED_ON = ("pascal",)
# The virtual GPU the pass sees: Volta, with the CUDA and cuDNN versions whose lists TensorFlow 2.21 uses for it.
GPU_ENVIRONMENT = {"architecture": "7.0", "cuda": "12000", "cudnn": "8900"}


def allow_without_gpu():
    """Let the rewrite run on a machine without a GPU (before TensorFlow first runs the pass in this process)."""
    os.environ[IGNORE_PERFORMANCE] = "1"


def enabled():
    """Whether the running script turned TensorFlow's automatic mixed precision graph rewrite on."""
    import tensorflow as tf

    return bool(tf.config.optimizer.get_experimental_options().get("auto_mixed_precision", False))


def rewritten(graph, outputs):
    """``graph`` (a ``tf.Graph``) as TensorFlow's mixed precision pass rewrites it for a GPU.

    ``outputs`` are the names of the step's output tensors, which the pass
    keeps.  The returned graph has the same op names (devices cleared) plus
    the ``Cast`` ops the pass inserts.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2, device_properties_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.grappler import cluster as grappler_cluster
    from tensorflow.python.grappler import tf_optimizer

    allow_without_gpu()
    graph_def = graph.as_graph_def()
    devices = {node.name: node.device for node in graph_def.node}
    for node in graph_def.node:
        node.device = GPU
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    meta.collection_def["train_op"].node_list.value.extend(sorted({t.rpartition(":")[0] for t in outputs}))
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers[:] = ["auto_mixed_precision"]
    rewrite.min_graph_nodes = -1
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    gpu = device_properties_pb2.NamedDevice(
        name=GPU, properties=device_properties_pb2.DeviceProperties(type="GPU", environment=GPU_ENVIRONMENT))
    out = tf_optimizer.OptimizeGraph(config, meta, cluster=grappler_cluster.Cluster(devices=[gpu]))
    if (not any(node.name.endswith(CAST_SUFFIX) for node in out.node)
            and any(node.op in PRODUCTS for node in out.node)):
        raise CaptureError("TensorFlow's mixed precision rewrite changed nothing: it ran earlier in this process "
                           f"without {IGNORE_PERFORMANCE}=1; capture in a fresh process")
    for node in out.node:
        node.device = devices.get(node.name, "")
    result = tf.Graph()
    with result.as_default():
        tf.graph_util.import_graph_def(out, name="")
    return result
