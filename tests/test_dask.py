"""Dask (issue 18, item 3): jitted gradients over chunks on worker processes, results
equal to one process, one compile per worker. Dask is an optional extra: these tests
skip without it. The LocalCluster test starts two worker processes (slow)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import adkit as ak

pytest.importorskip("cloudpickle")
dask = pytest.importorskip("dask")
pytest.importorskip("distributed")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import dask_gradients as example  # noqa: E402  (needs dask; workers inherit sys.path)


def test_dask_serializes_a_jitted_gradient():
    """Dask's own serialization (pickle, then cloudpickle) carries jit(grad(f))."""
    from distributed.protocol import deserialize, serialize
    params = example.init_params()
    x = ak.tensor(np.random.default_rng(0).standard_normal((50, example.D)))
    back = deserialize(*serialize(example.param_gradients))
    for got, want in zip(back(*params, x), example.param_gradients(*params, x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_dask_threaded_scheduler_map_blocks():
    """The same graph on Dask's default threads: no pickling, one process."""
    params, X = example.init_params(), example.data(3, 200)
    got = example.all_input_gradients(X, params).compute(scheduler="threads")
    want = example.input_gradients(*params, ak.tensor(X.compute()))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.slow
def test_dask_local_cluster_gradients_compile_once_per_worker():
    params, X = example.init_params(), example.data(8, 2000)
    with example.cluster(2) as client:
        grads = example.total_param_gradients(X, params).compute()
        per_example = example.all_input_gradients(X, params).compute()
        again = example.total_param_gradients(X, params).compute()  # compiled already
        report = client.run(example.compiles, example.param_gradients,
                            example.input_gradients)
    assert len(report) == 2
    for counts in report.values():  # one signature, compiled (or read from disk) once
        assert [n for n, _ in counts] == [1, 1], report
    x = ak.tensor(X.compute())
    for g, h, ref in zip(grads, again, example.param_gradients(*params, x)):
        np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(g.numpy(), h.numpy())
    np.testing.assert_allclose(per_example, example.input_gradients(*params, x).numpy(),
                               rtol=1e-10, atol=1e-14)


def test_chunk_gradients_by_row_tiles_equal_the_whole_chunk():
    """A chunk of more rows than TILE_ROWS runs tile by tile (views of the chunk, summed
    or stacked): the same gradients as one call on the whole chunk."""
    params = example.init_params()
    block = np.random.default_rng(2).standard_normal((2 * example.TILE_ROWS + 1, example.D))
    tiles = example.row_tiles(block)
    assert len(tiles) == 3 and all(np.shares_memory(t.numpy(), block) for t in tiles)
    x = ak.tensor(block)
    got = example.chunk_param_gradients(params, block).compute(scheduler="sync")
    for g, want in zip(got, example.param_gradients(*params, x)):
        np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        example.block_input_gradients(block, *(p.numpy() for p in params)),
        example.input_gradients(*params, x).numpy(), rtol=1e-10, atol=1e-14)
