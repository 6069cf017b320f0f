"""vmap over the whole op table: `ak.func.vmap(op)` equals stacking the op applied to each
example (JAX's _CheckBatching), for in_dims 0, -1 and None mixes; and every built-in op
has a batching rule of its own (not the per-example fallback)."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd.function import Function
from adkit.func import vmap

from ._op_cases import flatten_outputs, op_cases
from .op_db import to_tensor_args

B = 3
CASES = op_cases(dtypes=[np.float64])


def _batch(arr, dim, rng):
    """B slightly different copies of a sample array, stacked along dim."""
    copies = []
    for b in range(B):
        if arr.dtype.kind == "f":
            copies.append(arr + 0.01 * b * rng.standard_normal(arr.shape))
        else:
            copies.append(arr.copy())
    return np.stack(copies, axis=dim)


def _configs(info, sample):
    pos = [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray)]
    if info.name in ("getitem", "setitem"):
        pos = [p for p in pos if p != 1]  # an indexing key is static
    if not pos:
        return []
    configs = [{p: 0 for p in pos}, {p: -1 for p in pos}]
    if len(pos) > 1:
        configs.append({pos[0]: 0})  # the others unbatched
        if info.name not in _WRITES_INTO_FIRST:
            configs.append({pos[-1]: -1})
    return configs


# In-place ops writing into their first argument: an unbatched target with a batched
# value is an error under vmap (as in PyTorch), tested in test_vmap_inplace/indexing.
_WRITES_INTO_FIRST = ("setitem", "index_add_", "index_put_", "mul_ through a slice",
                      "add_ through a transpose", "copy_ into a view",
                      "div_ through a flat view")


@pytest.mark.parametrize("info,dtype,sample", CASES)
def test_vmap_matches_per_example_loop(info, dtype, sample):
    configs = _configs(info, sample)
    if not configs:
        pytest.skip("no tensor argument to batch")
    for dims in configs:
        rng = np.random.default_rng(0)
        args = list(sample.args)
        batched = {p: _batch(args[p], d if d >= 0 else args[p].ndim + 1 + d, rng)
                   for p, d in dims.items()}
        positions = sorted(dims)

        def per_example(*tensors):
            call = list(args)
            for p, t in zip(positions, tensors):
                call[p] = t
            call = [ak.tensor(a) if isinstance(a, np.ndarray) and i not in dims
                    and not (info.name in ("getitem", "setitem") and i == 1) else a
                    for i, a in enumerate(call)]
            if info.name in ("getitem", "setitem") and isinstance(call[1], ak.Tensor):
                call[1] = call[1].numpy()
            return info.op(*call, **sample.kwargs)

        in_tensors = [ak.tensor(batched[p]) for p in positions]
        in_dims = tuple(dims[p] for p in positions)
        got = vmap(per_example, in_dims=in_dims)(*in_tensors)
        examples = []
        for b in range(B):
            ex = [ak.tensor(np.take(batched[p], b, axis=dims[p])) for p in positions]
            examples.append(flatten_outputs(per_example(*ex)))
        got = flatten_outputs(got)
        for k, g in enumerate(got):
            want = np.stack([np.asarray(e[k].detach().numpy()) for e in examples])
            assert g.shape == want.shape, (dims, g.shape, want.shape)
            assert g.dtype == ak.tensor(want).dtype, (dims, g.dtype, want.dtype)
            np.testing.assert_allclose(g.detach().numpy(), want, rtol=1e-10, atol=1e-12,
                                       err_msg=f"in_dims={dims}")


def _builtin_classes():
    import inspect

    import adkit.ops as ops
    classes = []
    for module in ops.MODULES:
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Function) and \
                    obj.__module__ == module.__name__ and not obj.__name__.startswith("_") \
                    and obj.forward is not Function.forward:
                classes.append(obj)
    return classes


def test_every_builtin_op_has_its_own_batching_rule():
    missing = sorted(c.__name__ for c in _builtin_classes() if c.vmap is Function.vmap)
    assert not missing, f"ops batched only by the per-example fallback: {missing}"
