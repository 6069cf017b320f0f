"""adkit.ir: computations as networkx graphs: tracing, evaluation, printing, passes."""
from . import passes, rules
from .graph import Graph, GraphError
from .rules import TensorSpec
from .trace import TracerTensor, TracerValueError, TracingInterpreter, trace

__all__ = ["Graph", "GraphError", "TensorSpec", "TracerTensor", "TracerValueError",
           "TracingInterpreter", "trace", "rules", "passes"]
