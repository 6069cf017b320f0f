"""Gradients over the chunks of a data set on a Dask cluster of worker processes.

The loss is a small neural network's squared error over the rows of X. Two jitted
gradients travel to the workers: `param_gradients` (d loss / d weights, one per chunk,
summed with `dask.delayed`) and `input_gradients` (d loss / d x, one row per example,
computed chunk by chunk with `map_blocks`). A jitted function pickles by reference
(module and name: a worker imports this module) or, when this file runs as a script,
by value through cloudpickle, never as machine code; every copy a worker unpickles is
one function. So each worker compiles each gradient once, whatever the number of
chunks, and the LLVM part comes from the on-disk cache (ADKIT_CACHE_DIR, shared by the
processes of one machine) when another worker already made it. Tensors travel as
values (adkit/interop.py).

    pip install dask distributed
    python examples/dask_gradients.py [--workers 2] [--chunks 16] [--rows 20000]
"""
import argparse
import contextlib
import time

import dask
import dask.array as da
import numpy as np

import adkit as ak
import adkit.func as F

D, HIDDEN = 32, 64


def loss(w1, b1, w2, x):
    """Squared error of a one-hidden-layer network fitting sin(3 x0), summed over rows."""
    target = (3.0 * x[:, :1]).sin()
    hidden = (x @ w1 + b1).tanh()
    return ((hidden @ w2 - target) ** 2).sum()


# compile="eager": a chunk's gradient is big enough that its first call waits for native
# code (the default, "background", would run it on numpy while LLVM compiles)
param_gradients = ak.jit(F.grad(loss, argnums=(0, 1, 2)), compile="eager")
input_gradients = ak.jit(F.grad(loss, argnums=3), compile="eager")


def init_params(seed=0, hidden=HIDDEN):
    """The weights of a network with `hidden` units (the jitted gradients take any)."""
    rng = np.random.default_rng(seed)
    return (ak.tensor(rng.standard_normal((D, hidden)) / np.sqrt(D)),
            ak.zeros(hidden, dtype=ak.float64),
            ak.tensor(rng.standard_normal((hidden, 1)) / np.sqrt(hidden)))


def data(chunks, rows, seed=1):
    """X: chunks * rows examples of D features, each chunk made on the worker that uses it."""
    return da.random.default_rng(seed).standard_normal((chunks * rows, D),
                                                       chunks=(rows, D))


# Rows per jitted call. A chunk's gradient runs tile by tile: a tile's hidden layer
# (4,000 rows x 64 units, 2 MB) stays in the core's cache, where a whole chunk's would
# go through memory, which the two workers share (20,000 rows on one core: parameter
# gradients 12.7 -> 8.2 ms, input gradients 13.4 -> 10.6 ms).
TILE_ROWS = 4000


def row_tiles(block):
    """The block's rows in equal tiles of at most about TILE_ROWS (equal, so that each
    worker compiles one signature, when the block's rows allow it)."""
    block = np.ascontiguousarray(block)
    count = max(1, -(-len(block) // TILE_ROWS))
    return [ak.from_numpy(t) for t in np.array_split(block, count)]  # views, no copies


def summed(parts):
    return tuple(sum(grads[1:], grads[0]) for grads in zip(*parts))


@dask.delayed
def chunk_param_gradients(params, block):
    # adkit tensors, pickled back as values
    return summed([param_gradients(*params, tile) for tile in row_tiles(block)])


add_up = dask.delayed(summed)


def total_param_gradients(X, params):
    """A delayed: the gradient of the loss over all of X, summed over the chunks."""
    return add_up([chunk_param_gradients(params, block) for block in X.to_delayed().ravel()])


def block_input_gradients(block, w1, b1, w2):
    return np.concatenate([input_gradients(w1, b1, w2, tile).numpy()
                           for tile in row_tiles(block)])


def all_input_gradients(X, params):
    """A dask array: d loss / d x, row by row, chunk by chunk."""
    w1, b1, w2 = (p.numpy() for p in params)
    return X.map_blocks(block_input_gradients, w1, b1, w2, dtype=X.dtype)


def compiles(*jitted):
    """Run on a worker (client.run): per jitted function, how many signatures it
    compiled in this process and how many of those read their code from the disk cache."""
    return [(len(j.cache), sum(bool(getattr(getattr(c, "module", None), "from_cache", 0))
                               for c in j.cache.values())) for j in jitted]


@contextlib.contextmanager
def cluster(workers):
    """A client of `workers` local worker processes, one thread each (and one native
    thread each: ADKIT_NUM_THREADS=1; Dask's nanny already sets BLAS to one thread).
    The workers' statistical profiler is off: it samples the compute thread's stack
    every 10 ms from a thread of its own that needs the GIL and a core, and with a
    worker per core there is no core to spare for it (two workers on two cores, 16
    chunks of 50,000 rows: 0.80 s a run with it, 0.73 without, one A/B of 8 runs)."""
    from dask.distributed import Client, LocalCluster
    no_profiler = dask.config.set({"distributed.worker.profile.enabled": False})
    with no_profiler, LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0",
                                   env={"ADKIT_NUM_THREADS": "1"}) as c, \
            Client(c) as client:
        yield client


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()
    params, X = init_params(), data(args.chunks, args.rows)
    with cluster(args.workers) as client:
        t0 = time.perf_counter()
        grads = total_param_gradients(X, params).compute()
        t1 = time.perf_counter()
        per_example = all_input_gradients(X, params).compute()
        t2 = time.perf_counter()
        report = client.run(compiles, param_gradients, input_gradients)
    print(f"{args.chunks} chunks of {args.rows} rows on {args.workers} workers: parameter "
          f"gradients {t1 - t0:.2f} s (compiles included), input gradients {t2 - t1:.2f} s")
    for worker, counts in sorted(report.items()):
        print(f"  {worker}: (signatures compiled, of which from the disk cache) {counts}")
    x = ak.tensor(X.compute())  # the same in one process
    for g, ref in zip(grads, param_gradients(*params, x)):
        np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(per_example, input_gradients(*params, x).numpy(),
                               rtol=1e-10, atol=1e-14)
    print("results agree with one process")


if __name__ == "__main__":
    main()
