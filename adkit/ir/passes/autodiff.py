"""The transform passes: vjp, jvp and vmap of a Graph, each a new Graph.

Owns: nothing but the plumbing. Each pass evaluates the graph (through every op's own
`Function.apply`) under a transform while tracing a new graph, so the ops' own
backward / jvp / batching rules build it (Autodidax's jvp_jaxpr pattern): no per-op code.

    vjp(g):  inputs = primals + one cotangent per output;
             outputs = the original outputs + one gradient per input
    jvp(g):  inputs = primals + one tangent per input;
             outputs = the original outputs + one tangent per output
    vmap(g, in_dims, out_dims=0): inputs batched along in_dims (None: unbatched)

The vjp graph reuses the forward values (the backward rules read what the forward nodes
computed); run `dce`/`cse`/`fold_constants` after it to tidy up. Every node of the new
graph carries an `origin` (provenance.py): forward, backward, tangent or batched, the
node it was made for, and for gradients and tangents the primal they belong to.
"""
import numpy as np

from ... import func
from ...autograd import engine
from ...autograd.grad_mode import enable_grad
from ...tensor import _make
from .. import evaluate
from ..rules import TensorSpec
from ..trace import trace
from .provenance import Tagger, output_value


def _example(spec):
    return _make(np.zeros(spec.shape, spec.dtype.np))


def vjp(graph):
    """The graph computing (outputs, gradients of <cotangents, outputs> w.r.t. inputs)."""
    n_in = len(graph.inputs)
    in_specs, out_specs = graph.input_specs(), graph.output_specs()
    tagger = Tagger(graph, "forward")

    def forward_and_backward(*args):
        tagger.start(args)
        primals = [p.detach().requires_grad_(p.is_floating_point()) for p in args[:n_in]]
        cotangents = args[n_in:]
        with enable_grad():
            outputs = evaluate.run(graph, primals, on_node=tagger.on_node)
        wanted = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
        diff = [p for p in primals if p.requires_grad]
        grads = engine.grad([o for o, _ in wanted], diff, [c for _, c in wanted],
                            allow_unused=True, materialize_grads=True) if wanted and diff \
            else [None] * len(diff)
        it = iter(grads)
        grads = [next(it) if p.requires_grad else _zeros_like(p) for p in primals]
        grads = [_zeros_like(p) if g is None else g for g, p in zip(grads, primals)]
        return tuple(o.detach() for o in outputs) + tuple(grads)

    derived = trace(forward_and_backward, *map(_example, in_specs + out_specs))
    n_out = len(out_specs)
    return tagger.finish(
        derived,
        inputs=[("forward", n, None) for n in graph.inputs] +
               [("backward", None, output_value(graph, j)) for j in range(n_out)],
        outputs=[("forward", n, None) for n in graph.outputs] +
                [("backward", None, i) for i in range(n_in)])


def _zeros_like(t):
    return _make(np.zeros(t._data.shape, t._data.dtype))


def jvp(graph):
    """The graph computing (outputs, J @ tangents) by forward mode."""
    n_in = len(graph.inputs)
    in_specs = graph.input_specs()
    tagger = Tagger(graph, "tangent")

    def primal_and_tangent(*args):
        tagger.start(args)
        primals = list(args[:n_in])
        # integer and bool inputs carry no tangent (their tangent inputs are unused)
        moving = [i for i, p in enumerate(primals) if p.is_floating_point()]

        def on_floats(*floats):
            for i, value in zip(moving, floats):
                primals[i] = value
            return tuple(evaluate.run(graph, primals, on_node=tagger.on_node))
        outputs, tangents = func.jvp(on_floats, tuple(primals[i] for i in moving),
                                     tuple(args[n_in + i] for i in moving))
        return tuple(outputs) + tuple(tangents)

    float_specs = [TensorSpec(s.shape, s.dtype) for s in in_specs]
    derived = trace(primal_and_tangent, *map(_example, in_specs + float_specs))
    n_out = len(graph.outputs)
    return tagger.finish(
        derived,
        inputs=[("forward", n, None) for n in graph.inputs] +
               [("tangent", None, i) for i in range(n_in)],
        outputs=[("forward", n, None) for n in graph.outputs] +
                [("tangent", None, output_value(graph, j)) for j in range(n_out)])


def vmap(graph, in_dims, out_dims=0, *, batch_size):
    """The graph of the batched computation: each input with an int in `in_dims` (one
    entry per input, or one int/None for all) gets a batch dim of `batch_size` at that
    position. (Graphs are specialized to shapes, so the batch size must be given.)"""
    in_specs = graph.input_specs()
    dims = [in_dims] * len(in_specs) if in_dims is None or isinstance(in_dims, int) \
        else list(in_dims)
    if len(dims) != len(in_specs):
        raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(in_specs)} inputs")
    size = int(batch_size)
    examples = []
    for spec, d in zip(in_specs, dims):
        shape = list(spec.shape)
        if d is not None:
            d = d % (len(shape) + 1)
            shape.insert(d, size)
        examples.append(_example(TensorSpec(tuple(shape), spec.dtype)))

    single = len(graph.outputs) == 1
    tagger = Tagger(graph, "batched")

    def batched(*args):
        tagger.start(args)
        out = func.vmap(lambda *xs: tuple(evaluate.run(graph, list(xs),
                                                       on_node=tagger.on_node)),
                        in_dims=tuple(dims), out_dims=out_dims)(*args)
        return out[0] if single else tuple(out)

    derived = trace(batched, *examples)
    return tagger.finish(derived, inputs=[("batched", n, None) for n in graph.inputs],
                         outputs=[("batched", n, None) for n in graph.outputs])
