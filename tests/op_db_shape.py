"""Op rows: shape ops."""
import numpy as np

import adkit as ak

from .op_db import OpInfo, SampleInput, make_array


def _reshape_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng)
    return [SampleInput((x, (6, 4))), SampleInput((x, (-1,))), SampleInput((x, (4, -1, 2))),
            SampleInput((make_array((), dtype, rng), (1, 1))),
            SampleInput((make_array((0, 3), dtype, rng), (3, 0)))]


def _expand_samples(dtype, rng):
    return [SampleInput((make_array((3, 1), dtype, rng), (3, 4))),
            SampleInput((make_array((4,), dtype, rng), (2, 3, 4))),
            SampleInput((make_array((), dtype, rng), (2,))),
            SampleInput((make_array((1, 2), dtype, rng), (-1, 2)))]


def _expand_ref(x, shape):
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return np.broadcast_to(x, shape)


def _samples(*specs):
    """Samples from (shape, *params, kwargs-dict?) tuples: one array then static params."""
    def samples(dtype, rng):
        out = []
        for shape, *params in specs:
            kwargs = params.pop() if params and isinstance(params[-1], dict) else {}
            out.append(SampleInput((make_array(shape, dtype, rng),) + tuple(params), kwargs,
                                   name=str(shape)))
        return out
    return samples


def _several(*shape_lists):
    """Samples of several arrays each (cat/stack), with the dim as a kwarg."""
    def samples(dtype, rng):
        return [SampleInput(tuple(make_array(s, dtype, rng) for s in shapes), {"dim": dim})
                for shapes, dim in shape_lists]
    return samples


def _squeeze_ref(x, dim=None):
    if dim is None or x.ndim == 0:
        return np.squeeze(x)
    dims = (dim,) if isinstance(dim, int) else dim
    return np.squeeze(x, tuple(d for d in dims if x.shape[d] == 1))


def _flatten_ref(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:])


def _split_ref(x, spec, dim=0):
    n = x.shape[dim]
    if isinstance(spec, int):
        cuts = list(range(spec, n, spec)) if spec else []
    else:
        cuts = list(np.cumsum(spec)[:-1])
    return tuple(np.split(x, cuts, axis=dim))


def _chunk_ref(x, chunks, dim=0):
    size = -(-x.shape[dim] // chunks)
    return _split_ref(x, size, dim)


def _strided(x, shape):
    """view of a non-contiguous but viewable input: x[:, ::2] then view."""
    return x[:, ::2].view(shape)


ROWS = [
    OpInfo("reshape", np.reshape, _reshape_samples, method="reshape"),
    OpInfo("expand", _expand_ref, _expand_samples, op=lambda x, s: x.expand(s)),
    OpInfo("clone", np.copy, lambda dt, rng: [SampleInput((make_array((3, 2), dt, rng),))]),
    OpInfo("view", lambda x, s: x.reshape(s), _samples(((2, 3, 4), (6, 4)), ((2, 3), (-1,)),
                                                      ((), (1, 1)), ((0, 3), (3, 0))),
           op=lambda x, s: x.view(s)),
    OpInfo("view_strided", lambda x, s: x[:, ::2].reshape(s),
           _samples(((3, 4, 2), (6, 2)), ((2, 6, 3), (2, 3, 1, 3))), op=_strided),
    OpInfo("view_as", lambda x, o: x.reshape(o.shape),
           lambda dt, rng: [SampleInput((make_array((2, 6), dt, rng),
                                         make_array((3, 4), dt, rng)))],
           op=lambda x, o: x.view_as(o), grad_argnums=(0,)),
    OpInfo("reshape_as", lambda x, o: x.reshape(o.shape),
           lambda dt, rng: [SampleInput((make_array((2, 6), dt, rng).T,
                                         make_array((3, 4), dt, rng)))],
           op=lambda x, o: x.reshape_as(o), grad_argnums=(0,)),
    OpInfo("flatten", _flatten_ref, _samples(((2, 3, 4),), ((2, 3, 4), 1), ((2, 3, 2), 0, 1),
                                             ((),), ((3,),), ((2, 0, 3), 1, 2)),
           method="flatten"),
    OpInfo("unflatten", lambda x, d, s: x.reshape(x.shape[:d] + s + x.shape[d + 1:]),
           _samples(((2, 6), 1, (2, 3)), ((6, 2), 0, (-1, 3)), ((4,), 0, (2, 1, 2))),
           method="unflatten"),
    OpInfo("squeeze", _squeeze_ref, _samples(((1, 3, 1, 2),), ((1, 3, 1), 0), ((1, 3, 1), -1),
                                             ((1, 3, 1), 1), ((1, 3, 1), (0, 2)), ((),),
                                             ((), 0), ((0, 1),)),
           method="squeeze"),
    OpInfo("unsqueeze", np.expand_dims, _samples(((3, 2), 0), ((3, 2), 2), ((3, 2), -1),
                                                 ((), 0), ((0, 2), 1)),
           method="unsqueeze"),
    OpInfo("broadcast_to", np.broadcast_to, _samples(((3, 1), (2, 3, 4)), ((), (3,)),
                                                     ((4,), (0, 4))),
           method="broadcast_to"),
    OpInfo("expand_as", lambda x, o: np.broadcast_to(x, o.shape),
           lambda dt, rng: [SampleInput((make_array((3, 1), dt, rng),
                                         make_array((2, 3, 4), dt, rng)))],
           op=lambda x, o: x.expand_as(o), grad_argnums=(0,)),
    OpInfo("broadcast_tensors", np.broadcast_arrays,
           lambda dt, rng: [SampleInput((make_array((3, 1), dt, rng),
                                         make_array((4,), dt, rng), make_array((), dt, rng)))]),
    OpInfo("transpose", lambda x, a, b: np.swapaxes(x, a, b) if x.ndim else x,
           _samples(((2, 3, 4), 0, 2), ((3, 4), -1, 0), ((3,), 0, 0), ((), 0, -1),
                    ((2, 0), 0, 1)),
           method="transpose"),
    OpInfo("swapaxes", np.swapaxes, _samples(((2, 3, 4), 1, 2)), method="swapaxes"),
    OpInfo("permute", np.transpose, _samples(((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)),
                                             ((3, 4), (1, 0)), ((), ())),
           method="permute"),
    OpInfo("t", lambda x: x.T, _samples(((3, 4),), ((4,),), ((),)), method="t"),
    OpInfo("T", lambda x: x.T, _samples(((2, 3, 4),), ((3, 4),), ((3,),), ((),)),
           op=lambda x: x.T),
    OpInfo("contiguous", lambda x: np.ascontiguousarray(x.T),
           lambda dt, rng: [SampleInput((make_array((3, 4), dt, rng),))],
           op=lambda x: x.t().contiguous(), notes="contiguous inputs are returned as is"),
    OpInfo("cat", lambda *xs, dim=0: np.concatenate(xs, axis=dim),
           _several((((2, 3), (1, 3), (3, 3)), 0), (((2, 3), (2, 1)), -1),
                    (((2, 3, 2), (2, 0, 2)), 1), (((3,),), 0)),
           op=lambda *xs, dim=0: ak.cat(list(xs), dim=dim)),
    OpInfo("concatenate", lambda *xs, dim=0: np.concatenate(xs, axis=dim),
           _several((((2, 3), (2, 3)), 1)),
           op=lambda *xs, dim=0: ak.concatenate(xs, dim)),
    OpInfo("stack", lambda *xs, dim=0: np.stack(xs, axis=dim),
           _several((((2, 3), (2, 3), (2, 3)), 0), (((2, 3), (2, 3)), -1),
                    (((), ()), 0), (((3,),), 1)),
           op=lambda *xs, dim=0: ak.stack(list(xs), dim=dim)),
    OpInfo("split", _split_ref, _samples(((5, 2), 2), ((5, 2), 1, {"dim": 1}),
                                         ((5, 2), [1, 0, 4]), ((3, 4), 4, {"dim": -1}),
                                         ((0, 2), 0)),
           method="split"),
    OpInfo("chunk", _chunk_ref, _samples(((5, 2), 3), ((6, 2), 4), ((3, 4), 2, {"dim": 1}),
                                         ((2, 3), 1)),
           method="chunk"),
    OpInfo("flip", lambda x, dims: np.flip(x, dims) if x.ndim else x,
           _samples(((2, 3, 4), (0, 2)), ((3, 4), (-1,)), ((3,), ()), ((), (0,))),
           method="flip"),
    OpInfo("repeat", np.tile, _samples(((2, 3), (2, 1)), ((2, 3), (1, 2, 3)), ((), (2,)),
                                           ((3,), (0, 2)), ((), ())),
           op=lambda x, s: x.repeat(s)),
]
