"""ADBench's GMM objective and its gradient, written once for every tool compared.

Reproduces the Gaussian-mixture problem of Srajer, Kukelova and Fitzgibbon, "A benchmark of
selected algorithmic differentiation tools on some problems in computer vision and machine
learning" (Optimization Methods & Software, 2018), as its public code (microsoft/ADBench,
``gmm_objective`` in C++ and Python) defines it:

    f(alphas, means, icf) =  -n d/2 log(2 pi)
                           + sum_i logsumexp_k( alphas_k + sum(q_k) - 1/2 |Q_k (x_i - mu_k)|^2 )
                           - n logsumexp(alphas)
                           + sum_k ( gamma^2/2 (|exp(q_k)|^2 + |l_k|^2) - m sum(q_k) )
                           - k ( n' d (log gamma - log(2)/2) - log Gamma_d(n'/2) ),  n' = d + m + 1

Parameters: alphas [k], means [k, d], icf [k, d (d + 1) / 2] whose row k holds q_k (the log
of Q_k's diagonal, d entries) then l_k (Q_k's strictly lower triangle, column by column:
(1,0), (2,0), ..., (d-1,0), (2,1), ...). Q_k is the inverse Cholesky factor of component k's
covariance. Data x [n, d]; Wishart prior (gamma, m) = (1, 0) as ADBench generates it.

Note on the sign of the prior: ADBench's code adds the prior term as written above (``out -
k * C``), which is the *negative* of the log-Wishart density (gradbench's port, which
incorporates ADBench pull request 211, flips it). This module keeps ADBench's definition, so
values and gradients are comparable with ADBench's own outputs.

Implementations (``TOOLS``): numpy (objective only), numpy hand-derived gradient (the paper's
"manual" tool), adkit eager (``ak.func.grad_and_value``, and ``.backward()``), adkit jit
(``ak.jit(ak.func.grad_and_value(...))``), ``jax.jit(jax.value_and_grad)``, torch eager
(``.backward()``) and HIPS autograd. One function, ``objective(ns, ...)``, serves all of them
through a tiny namespace adapter.

    python papers/adbench_gmm/gmm.py [--config small|medium|large|xl|all] [--tools a,b,...]

checks that every available tool agrees with the hand-derived gradient (relative 1e-8 in
float64, max-norm) and, on the smallest configuration, with central finite differences. Each
tool runs in its own subprocess: jax's and llvmlite's LLVMs must not share a process.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

# (d, k, n): small/medium/large configurations that run in seconds ("all" = these three).
# ADBench's generator covers d up to 128, k in {5, 10, 25, 50, 100, 200}, n in {1000, 10000}.
CONFIGS = {
    "small": (2, 5, 1000),
    "medium": (10, 25, 10000),
    "large": (20, 50, 10000),
    "xl": (64, 50, 10000),      # opt-in: ~1-2 GB of intermediates, seconds per gradient
}
DEFAULT_CONFIGS = ["small", "medium", "large"]
SEED = 31337          # ADBench's gmm-data-gen.py
K_MAX, N_MAX = 200, 10000


# ----------------------------------------------------------------------------- data
def generate(d, k, n, seed=SEED):
    """Data drawn as ADBench's ``data/gmm/gmm-data-gen.py`` draws it.

    One uniform [0, 1) pool of K_MAX * d numbers (the means) and one standard-normal pool of
    K_MAX * (1 + d + d (d - 1) / 2) + N_MAX * d numbers, both from ``np.random.seed(31337)``;
    alphas, icf rows and x rows are then read from the normal pool in that order, and the
    means from the uniform pool, for the first k components and n points. gamma = 1, m = 0.
    (This reseeds per configuration, as gradbench's port of the script does; the original
    seeds once and loops over d = 2, 4, ..., 128, so its files for d > 2 come from later in
    the stream. Not compared value by value with ADBench's data files here.)
    """
    if n > N_MAX or k > K_MAX:
        raise ValueError(f"generator pools hold k <= {K_MAX}, n <= {N_MAX}")
    rs = np.random.RandomState(seed)
    uniform = rs.uniform(0.0, 1.0, K_MAX * d)
    normal = rs.normal(0.0, 1.0, K_MAX * (1 + d + d * (d - 1) // 2) + N_MAX * d)
    icf_size = d * (d + 1) // 2
    alphas = normal[:k].copy()
    icf = normal[k:k + k * icf_size].reshape(k, icf_size).copy()
    start = k + k * icf_size
    x = normal[start:start + n * d].reshape(n, d).copy()
    means = uniform[:k * d].reshape(k, d).copy()
    return {"alphas": alphas, "means": means, "icf": icf, "x": x, "gamma": 1.0, "m": 0}


def config_data(name):
    return generate(*CONFIGS[name])


# ----------------------------------------------------------------------------- objective
def log_gamma_distrib(a, p):
    """log of the multivariate gamma function Gamma_p(a)."""
    return 0.25 * p * (p - 1) * math.log(math.pi) + sum(
        math.lgamma(a + 0.5 * (1 - j)) for j in range(1, p + 1))


def constant_terms(d, k, n, gamma, m):
    """The parameter-free part: -n d/2 log(2 pi) - k (C - log Gamma_d(n'/2))."""
    n_w = d + m + 1
    c = n_w * d * (math.log(gamma) - 0.5 * math.log(2.0))
    return -n * d * 0.5 * math.log(2 * math.pi) - k * (c - log_gamma_distrib(0.5 * n_w, d))


def qt_layout(d):
    """(index, mask), each [d, d]: Q_k^T = concat(exp(q_k), l_k)[index] * mask.

    Q[i, i] = exp(q_i); Q[j, i] (j > i) = l[t] with t running column by column, as ADBench's
    Qtimesx reads ltri. The transpose is built directly so that y = x_c @ Q^T (rows of x).
    """
    index = np.zeros((d, d), dtype=np.int64)
    mask = np.zeros((d, d))
    t = d
    for i in range(d):
        index[i, i] = i
        mask[i, i] = 1.0
        for j in range(i + 1, d):
            index[i, j] = t        # Q^T[i, j] = Q[j, i] = l_t
            mask[i, j] = 1.0
            t += 1
    return index, mask


def objective(ns, params, x, gamma, m, layout):
    """ADBench's GMM objective over a numpy-like namespace ``ns`` (see the ``*Ns`` classes).

    params = (alphas, means, icf); layout = ns-converted (index, mask, constant).
    """
    alphas, means, icf = params
    index, mask, const = layout
    d = x.shape[1]
    n = x.shape[0]
    logdiag = icf[:, :d]
    qdiags = ns.exp(logdiag)                                  # [k, d]
    sum_qs = ns.sum(logdiag, 1)                               # [k]
    lower = icf[:, d:]                                        # [k, d (d - 1) / 2]
    packed = ns.concat([qdiags, lower], 1)                    # [k, d (d + 1) / 2]
    qt = packed[:, index] * mask                              # [k, d, d]  (Q_k^T)
    # Q_k (x_i - mu_k) as rows: x @ Q_k^T - mu_k @ Q_k^T, shape [k, n, d]
    y = ns.matmul(x, qt) - ns.matmul(means[:, None, :], qt)
    main = (alphas + sum_qs)[:, None] - 0.5 * ns.sum(y * y, 2)   # [k, n]
    slse = ns.sum(ns.logsumexp(main, 0), 0)
    prior = ns.sum(0.5 * gamma * gamma * (ns.sum(qdiags * qdiags, 1) + ns.sum(lower * lower, 1))
                   - m * sum_qs, 0)
    return const + slse - n * ns.logsumexp(alphas, 0) + prior


def make_layout(ns, d, k, n, gamma, m):
    index, mask = qt_layout(d)
    return ns.index(index), ns.const(mask), constant_terms(d, k, n, gamma, m)


# ----------------------------------------------------------------------------- namespaces
class NumpyNs:
    """numpy (and the base for the others)."""
    exp = staticmethod(np.exp)
    matmul = staticmethod(np.matmul)

    @staticmethod
    def sum(a, axis):
        return np.sum(a, axis)

    @staticmethod
    def concat(arrays, axis):
        return np.concatenate(arrays, axis)

    @staticmethod
    def logsumexp(a, axis):
        mx = np.max(a, axis, keepdims=True)
        return np.log(np.sum(np.exp(a - mx), axis)) + np.squeeze(mx, axis)

    @staticmethod
    def index(a):
        return np.asarray(a)

    const = index
    asarray = index


class AdkitNs:
    def __init__(self):
        import adkit as ak
        self.ak = ak

    def exp(self, a):
        return self.ak.exp(a)

    def matmul(self, a, b):
        return self.ak.matmul(a, b)

    def sum(self, a, axis):
        return self.ak.sum(a, axis)

    def concat(self, arrays, axis):
        return self.ak.cat(arrays, axis)

    def logsumexp(self, a, axis):
        return self.ak.logsumexp(a, axis)

    def index(self, a):
        return self.ak.tensor(np.asarray(a))

    const = index
    asarray = index


class JaxNs:
    def __init__(self):
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        self.jnp = jnp
        self.exp, self.matmul = jnp.exp, jnp.matmul
        self.logsumexp = jax.nn.logsumexp

    def sum(self, a, axis):
        return self.jnp.sum(a, axis)

    def concat(self, arrays, axis):
        return self.jnp.concatenate(arrays, axis)

    def index(self, a):
        return np.asarray(a)          # static numpy index: a gather with a constant

    def const(self, a):
        return self.jnp.asarray(a)

    asarray = const


class TorchNs:
    def __init__(self):
        import torch
        self.torch = torch
        self.exp, self.matmul = torch.exp, torch.matmul

    def sum(self, a, axis):
        return self.torch.sum(a, axis)

    def concat(self, arrays, axis):
        return self.torch.cat(arrays, axis)

    def logsumexp(self, a, axis):
        return self.torch.logsumexp(a, axis)

    def index(self, a):
        return self.torch.as_tensor(np.asarray(a))

    const = index
    asarray = index


class AutogradNs(NumpyNs):
    def __init__(self):
        import autograd.numpy as anp
        from autograd.scipy.special import logsumexp
        self.anp = anp
        self.exp, self.matmul = anp.exp, anp.matmul
        self.lse = logsumexp

    def sum(self, a, axis):
        return self.anp.sum(a, axis)

    def concat(self, arrays, axis):
        return self.anp.concatenate(arrays, axis)

    def logsumexp(self, a, axis):
        return self.lse(a, axis)


# ----------------------------------------------------------------------------- numpy
def numpy_objective(data):
    p = (data["alphas"], data["means"], data["icf"])
    k, d = data["means"].shape
    layout = make_layout(NumpyNs, d, k, data["x"].shape[0], data["gamma"], data["m"])
    return float(objective(NumpyNs, p, data["x"], data["gamma"], data["m"], layout))


def numpy_value_and_grad(data):
    """The objective and its gradient derived by hand (the paper's "manual" column)."""
    alphas, means, icf, x = data["alphas"], data["means"], data["icf"], data["x"]
    gamma, m = data["gamma"], data["m"]
    k, d = means.shape
    n = x.shape[0]
    index, mask = qt_layout(d)
    logdiag, lower = icf[:, :d], icf[:, d:]
    qdiags = np.exp(logdiag)
    sum_qs = logdiag.sum(1)
    qt = np.concatenate([qdiags, lower], 1)[:, index] * mask          # [k, d, d]
    y = np.matmul(x, qt) - np.matmul(means[:, None, :], qt)           # [k, n, d]
    main = (alphas + sum_qs)[:, None] - 0.5 * np.sum(y * y, 2)        # [k, n]
    mx = main.max(0)
    e = np.exp(main - mx)
    s = e.sum(0)
    r = e / s                                                          # responsibilities
    am = alphas.max()
    ea = np.exp(alphas - am)
    value = (constant_terms(d, k, n, gamma, m) + np.sum(np.log(s) + mx)
             - n * (np.log(ea.sum()) + am)
             + np.sum(0.5 * gamma ** 2 * ((qdiags ** 2).sum(1) + (lower ** 2).sum(1))
                      - m * sum_qs))
    rk = r.sum(1)                                                      # [k]
    g_alphas = rk - n * ea / ea.sum()
    w = r[:, :, None] * y                                              # [k, n, d]
    wsum = w.sum(1)                                                    # [k, d]
    # main_kn depends on mu_k through y = (x - mu) Q^T:  d main / d mu = Q^T y
    g_means = np.matmul(qt, wsum[:, :, None])[:, :, 0]
    # d main / d Q^T[j, i] = -(x - mu)_j y_i, summed over points: -(x^T w_k - mu_k wsum_k^T)
    g_qt = -(np.matmul(x.T, w) - means[:, :, None] * wsum[:, None, :])
    g_icf = np.empty_like(icf)
    diag = np.arange(d)
    g_icf[:, :d] = g_qt[:, diag, diag] * qdiags + rk[:, None] + gamma ** 2 * qdiags ** 2 - m
    rows, cols = np.nonzero(np.triu(np.ones((d, d)), 1))
    order = np.argsort(index[rows, cols])                              # by l's position
    g_icf[:, d:] = g_qt[:, rows[order], cols[order]] + gamma ** 2 * lower
    return float(value), (g_alphas, g_means, g_icf)


def adbench_loops_objective(data):
    """A line-by-line transcription of ADBench's C++ ``gmm_objective`` (scalar loops, plain
    Python floats): the reference for the layout of icf. Slow; use it on a few points."""
    alphas, means, icf, x = data["alphas"], data["means"], data["icf"], data["x"]
    gamma, m = data["gamma"], data["m"]
    k, d = means.shape
    n = x.shape[0]
    icf_sz = d * (d + 1) // 2

    def logsumexp(v):
        mx = max(v)
        return math.log(sum(math.exp(t - mx) for t in v)) + mx

    qdiags = [[math.exp(icf[ik][i]) for i in range(d)] for ik in range(k)]
    sum_qs = [sum(icf[ik][i] for i in range(d)) for ik in range(k)]
    slse = 0.0
    for ix in range(n):
        main_term = []
        for ik in range(k):
            xc = [x[ix][i] - means[ik][i] for i in range(d)]
            qx = [qdiags[ik][i] * xc[i] for i in range(d)]           # Qtimesx
            lidx = d
            for i in range(d):
                for j in range(i + 1, d):
                    qx[j] += icf[ik][lidx] * xc[i]
                    lidx += 1
            main_term.append(alphas[ik] + sum_qs[ik] - 0.5 * sum(t * t for t in qx))
        slse += logsumexp(main_term)
    n_w = d + m + 1                                                      # log_wishart_prior
    c = n_w * d * (math.log(gamma) - 0.5 * math.log(2)) - log_gamma_distrib(0.5 * n_w, d)
    out = 0.0
    for ik in range(k):
        frobenius = (sum(t * t for t in qdiags[ik])
                     + sum(icf[ik][i] ** 2 for i in range(d, icf_sz)))
        out += 0.5 * gamma * gamma * frobenius - m * sum_qs[ik]
    prior = out - k * c
    return -n * d * 0.5 * math.log(2 * math.pi) + slse - n * logsumexp(list(alphas)) + prior


def subset(data, n_points):
    """The same parameters on the first n_points data points."""
    return dict(data, x=data["x"][:n_points])


def finite_differences(data, h=1e-5):
    """Central differences of the numpy objective in every parameter."""
    grads = []
    for name in ("alphas", "means", "icf"):
        g = np.zeros_like(data[name])
        flat = g.reshape(-1)
        for i in range(flat.size):
            plus, minus = dict(data), dict(data)
            plus[name] = data[name].copy()
            minus[name] = data[name].copy()
            plus[name].reshape(-1)[i] += h
            minus[name].reshape(-1)[i] -= h
            flat[i] = (numpy_objective(plus) - numpy_objective(minus)) / (2 * h)
        grads.append(g)
    return tuple(grads)


# ----------------------------------------------------------------------------- tools


def _gm(data):
    return data["gamma"], data["m"]


def make_tool(name, data):
    """(objective, value_and_grad, to_numpy) for one tool; call them with no arguments.

    ``objective()`` returns the value, ``value_and_grad()`` returns (value, (ga, gm, gi)) in
    the tool's own types (blocked until ready); ``to_numpy`` converts such a result.
    value_and_grad is None for numpy (objective only).
    """
    k, d = data["means"].shape
    n = data["x"].shape[0]
    gamma, m = _gm(data)
    params_np = (data["alphas"], data["means"], data["icf"])

    if name == "numpy":
        layout = make_layout(NumpyNs, d, k, n, gamma, m)
        return (lambda: objective(NumpyNs, params_np, data["x"], gamma, m, layout),
                None, lambda r: r)

    if name == "manual":
        return (lambda: numpy_objective(data), lambda: numpy_value_and_grad(data),
                lambda r: r)

    if name == "adkit-backward":
        import adkit as ak
        ns = AdkitNs()
        layout = make_layout(ns, d, k, n, gamma, m)
        params = tuple(ak.tensor(p, requires_grad=True) for p in params_np)
        x = ak.tensor(data["x"])

        def objective_only():
            with ak.no_grad():
                return objective(ns, params, x, gamma, m, layout)

        def value_and_grad():
            for p in params:
                p.grad = None
            value = objective(ns, params, x, gamma, m, layout)
            value.backward()
            return value.detach(), tuple(p.grad for p in params)

        def to_numpy(r):
            value, grads = r
            return float(value.item()), tuple(g.numpy() for g in grads)
        return objective_only, value_and_grad, to_numpy

    if name in ("adkit", "adkit-jit"):
        import adkit as ak
        import adkit.func as F
        ns = AdkitNs()
        layout = make_layout(ns, d, k, n, gamma, m)
        params = tuple(ak.tensor(p) for p in params_np)
        x = ak.tensor(data["x"])

        def f(params, x):
            return objective(ns, params, x, gamma, m, layout)
        vg = F.grad_and_value(f)               # returns (grads, value)
        if name == "adkit-jit":
            f, vg = ak.jit(f), ak.jit(vg)

        def value_and_grad():
            grads, value = vg(params, x)
            return value, grads

        def to_numpy(r):
            value, grads = r
            return float(value.item()), tuple(g.numpy() for g in grads)
        return (lambda: f(params, x)), value_and_grad, to_numpy

    if name == "jax-jit":
        ns = JaxNs()
        import jax
        jnp = ns.jnp
        layout = make_layout(ns, d, k, n, gamma, m)
        params = tuple(jnp.asarray(p) for p in params_np)
        x = jnp.asarray(data["x"])

        def f(params, x):
            return objective(ns, params, x, gamma, m, layout)
        fj = jax.jit(f)
        vgj = jax.jit(jax.value_and_grad(f))

        def value_and_grad():
            value, grads = vgj(params, x)
            return jax.block_until_ready((value, grads))

        def to_numpy(r):
            value, grads = r
            return float(value), tuple(np.asarray(g) for g in grads)
        return (lambda: fj(params, x).block_until_ready()), value_and_grad, to_numpy

    if name == "torch":
        ns = TorchNs()
        torch = ns.torch
        layout = make_layout(ns, d, k, n, gamma, m)
        params = tuple(torch.tensor(p, requires_grad=True) for p in params_np)
        x = torch.tensor(data["x"])

        def objective_only():
            with torch.no_grad():
                return objective(ns, params, x, gamma, m, layout)

        def value_and_grad():
            for p in params:
                p.grad = None
            value = objective(ns, params, x, gamma, m, layout)
            value.backward()
            return value.detach(), tuple(p.grad for p in params)

        def to_numpy(r):
            value, grads = r
            return float(value), tuple(g.numpy() for g in grads)
        return objective_only, value_and_grad, to_numpy

    if name == "autograd":
        ns = AutogradNs()
        import autograd
        layout = make_layout(ns, d, k, n, gamma, m)
        x = data["x"]

        def f(params, x):
            return objective(ns, params, x, gamma, m, layout)
        vg = autograd.value_and_grad(f)

        def to_numpy(r):
            value, grads = r
            return float(value), tuple(np.asarray(g) for g in grads)
        return (lambda: f(params_np, x)), (lambda: vg(params_np, x)), to_numpy

    raise ValueError(f"unknown tool {name!r}")


TOOLS = ["numpy", "manual", "adkit", "adkit-backward", "adkit-jit", "jax-jit", "torch",
         "autograd"]


# ----------------------------------------------------------------------------- checks
def rel_err(a, b):
    """max |a - b| / max |b| over all entries (max-norm relative error)."""
    a = np.concatenate([np.ravel(t) for t in a])
    b = np.concatenate([np.ravel(t) for t in b])
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def run_tool(name, config):
    """Value and gradient of one tool, in this process, as numpy."""
    data = config_data(config)
    obj, vg, to_numpy = make_tool(name, data)
    value = obj()
    value = float(value.item() if hasattr(value, "item") else value)
    if vg is None:
        return value, None
    return to_numpy(vg())


def _worker(name, config, out_path):
    try:
        value, grads = run_tool(name, config)
    except ImportError as e:
        with open(out_path + ".json", "w") as fh:
            json.dump({"missing": str(e)}, fh)
        return
    np.savez(out_path, *(grads or ()), value=value)
    with open(out_path + ".json", "w") as fh:
        json.dump({"ok": True, "value": value, "has_grad": grads is not None}, fh)
    sys.stdout.flush()


def check(config, tools, tol=1e-8, fd_tol=1e-6, out=print):
    """Compare every tool (each in a subprocess) with the hand-derived gradient."""
    data = config_data(config)
    ref_value, ref_grads = numpy_value_and_grad(data)
    out(f"[{config}] d, k, n = {CONFIGS[config]}; value {ref_value:.10g}")
    ok = True
    few = subset(data, 20)
    err = abs(adbench_loops_objective(few) - numpy_objective(few)) / abs(numpy_objective(few))
    ok &= err < tol
    out(f"  {'ADBench C++ loops (20 pts)':<28} value rel err {err:.1e}  "
        f"({'ok' if err < tol else 'FAIL'})")
    if config == "small":
        fd = finite_differences(data)
        err = rel_err(ref_grads, fd)
        ok &= err < fd_tol
        out(f"  {'manual vs central FD':<28} grad rel err {err:.1e}  "
            f"({'ok' if err < fd_tol else 'FAIL'}, tol {fd_tol:g})")
    with tempfile.TemporaryDirectory() as tmp:
        for name in tools:
            path = os.path.join(tmp, name)
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", name,
                                   config, path], capture_output=True, text=True)
            try:
                with open(path + ".json") as fh:
                    meta = json.load(fh)
            except OSError:
                out(f"  {name:<28} crashed: {proc.stderr.strip().splitlines()[-1:]}")
                ok = False
                continue
            if "missing" in meta:
                out(f"  {name:<28} skipped ({meta['missing']})")
                continue
            saved = np.load(path + ".npz")
            value = float(saved["value"])
            verr = abs(value - ref_value) / abs(ref_value)
            line = f"  {name:<28} value rel err {verr:.1e}"
            good = verr < tol
            if meta["has_grad"]:
                grads = tuple(saved[f"arr_{i}"] for i in range(3))
                gerr = rel_err(grads, ref_grads)
                good &= gerr < tol
                line += f"  grad rel err {gerr:.1e}"
            out(line + ("  ok" if good else "  FAIL"))
            ok &= bool(good)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small", choices=[*CONFIGS, "all"])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--worker", nargs=3, metavar=("TOOL", "CONFIG", "OUT"))
    args = parser.parse_args()
    if args.worker:
        return _worker(*args.worker)
    configs = DEFAULT_CONFIGS if args.config == "all" else [args.config]
    ok = all([check(c, args.tools.split(",")) for c in configs])
    print("all agree" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
