"""adkit.ir: computations as networkx graphs: tracing, evaluation, printing, passes.

For pass writers: `Graph` (schema and helpers in graph.py's docstring), `Value`,
`TensorSpec` (trace on shapes alone), `ops` (every op class by name), `passes`."""
from . import ops, passes, rules
from .graph import Graph, GraphError, Value
from .pair import pair_to_dot, render_pair
from .rules import TensorSpec
from .trace import TracerTensor, TracerValueError, TracingInterpreter, trace
from .viewer import view

__all__ = ["Graph", "GraphError", "TensorSpec", "TracerTensor", "TracerValueError",
           "TracingInterpreter", "Value", "ops", "trace", "rules", "passes", "view",
           "pair_to_dot", "render_pair"]
