"""The harnesses that measure this machine: what prediction reads, never on the prediction path.

ops: op timings under the TensorFlow profiler (micro-benchmarks and zoo
steps); remote_step: the fixed cost of driving a step; emulated_link: gRPC
and collectives over emulated links.  Each is given by the CLI what it needs
from above the cost model (a pricing callable, the emulated network).
"""
