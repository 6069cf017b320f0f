"""Random programs for the differential fuzzer: a program is a list of instructions, each a
line of Python over named values, written twice (adkit and numpy), so one program is
both the thing tested and its own numpy reference, and prints as a runnable repro.

Owns: the instruction table and `generate(rng)`. Does not: run checks (checks.py) or
shrink (fuzz.py). A generated instruction is kept only if numpy runs it, so shapes and
dtypes never need bookkeeping of their own.
Inputs are float tensors `x0`, `x1` kept away from 0 and ±1 (kinks of clamp/abs/where
sit there), so central differences are valid; instructions avoid ties by construction.
"""
import dataclasses
import types
import warnings

import numpy as np

from ..control import cond, fori_loop, scan
from ..ops import FUNCTIONS
from ..tensor import tensor

# What programs call `ak`: the public ops and ak.tensor (the same objects `import adkit as
# ak` gives; the package front itself sits above this layer).
ADKIT = types.SimpleNamespace(**FUNCTIONS, tensor=tensor, scan=scan, fori_loop=fori_loop,
                              cond=cond)

# name: (adkit line, numpy line, number of operands). `{o}` is the new value, `{a}`, `{b}`
# operands (names of live values). Lines may be several statements separated by "; ".
INSTRUCTIONS = {
    # elementwise, smooth
    "sin": ("{o} = {a}.sin()", "{o} = np.sin({a})", 1),
    "tanh": ("{o} = {a}.tanh()", "{o} = np.tanh({a})", 1),
    "exp_small": ("{o} = ({a} * 0.3).exp()", "{o} = np.exp({a} * 0.3)", 1),
    "square": ("{o} = {a} * {a}", "{o} = {a} * {a}", 1),
    "sigmoid": ("{o} = {a}.sigmoid()", "{o} = 1 / (1 + np.exp(-{a}))", 1),
    "log1p_sq": ("{o} = ({a} * {a}).log1p()", "{o} = np.log1p({a} * {a})", 1),
    # broadcasting binary ops
    "add": ("{o} = {a} + {b}", "{o} = {a} + {b}", 2),
    "mul": ("{o} = {a} * {b}", "{o} = {a} * {b}", 2),
    "sub": ("{o} = {a} - {b}", "{o} = {a} - {b}", 2),
    "div_safe": ("{o} = {a} / (1.5 + {b} * {b})", "{o} = {a} / (1.5 + {b} * {b})", 2),
    "atan2": ("{o} = ak.atan2({a}, {b} * {b} + 0.5)", "{o} = np.arctan2({a}, {b} * {b} + 0.5)",
              2),
    "matmul": ("{o} = {a} @ {b}", "{o} = {a} @ {b}", 2),
    # reductions
    "sum_all": ("{o} = {a}.sum()", "{o} = np.sum({a})", 1),
    "sum_0": ("{o} = {a}.sum(0)", "{o} = np.sum({a}, 0)", 1),
    "mean_last": ("{o} = {a}.mean(-1, keepdim=True)", "{o} = np.mean({a}, -1, keepdims=True)",
                  1),
    "amax_0": ("{o} = {a}.amax(0)", "{o} = np.amax({a}, 0)", 1),
    "max_dim_values": ("{o} = {a}.max(dim=-1)[0]", "{o} = np.max({a}, -1)", 1),
    "logsumexp_0": ("{o} = {a}.logsumexp(0)",
                    "{o} = np.log(np.sum(np.exp({a} - {a}.max(0)), 0)) + {a}.max(0)", 1),
    # views read
    "slice_1": ("{o} = {a}[1:]", "{o} = {a}[1:]", 1),
    "transpose": ("{o} = {a}.t()", "assert {a}.ndim <= 2; {o} = {a}.T", 1),
    "flatten": ("{o} = {a}.reshape(-1)", "{o} = {a}.reshape(-1)", 1),
    "unsqueeze_expand": ("{o} = {a}.unsqueeze(0).expand(2, *{a}.shape)",
                         "{o} = np.broadcast_to({a}[None], (2,) + {a}.shape)", 1),
    "select_0": ("{o} = {a}[0]", "{o} = {a}[0]", 1),
    # in-place ops through views of a fresh copy
    "mul_on_slice": ("{o} = {a}.clone(); {o}[..., 1:].mul_(2.0)",
                     "{o} = {a}.copy(); {o}[..., 1:] *= 2.0", 1),
    "add_view_to_view": ("{o} = {a}.clone(); {o}[..., :1].add_({b}[..., :1] * 1.0)",
                         "{o} = {a}.copy(); {o}[..., :1] += {b}[..., :1] * 1.0", 2),
    "exp_on_transposed_slice": ("{o} = {a}.clone(); {o}.t()[:1].exp_()",
                                "assert {a}.ndim <= 2; {o} = {a}.copy(); "
                                "{o}.T[:1] = np.exp({o}.T[:1])", 1),
    "zero_on_flat_view": ("{o} = {a}.clone(); {o}.view(-1)[::2].zero_()",
                          "{o} = {a}.copy(); {o}.reshape(-1)[::2] = 0", 1),
    "copy_into_view": ("{o} = {a}.clone(); {o}[..., -1:].copy_({b}[..., :1].sin())",
                       "{o} = {a}.copy(); assert np.broadcast_shapes({o}[..., -1:].shape, "
                       "{b}[..., :1].shape) == {o}[..., -1:].shape; "  # copy_'s rule
                       "{o}[..., -1:] = np.sin({b}[..., :1])", 2),
    "fill_view": ("{o} = {a}.clone(); {o}[..., 0].fill_(0.5)",
                  "{o} = {a}.copy(); {o}[..., 0] = 0.5", 1),
    "div_on_view": ("{o} = {a}.clone(); {o}[1:].div_(2.0 + {b}[1:] * {b}[1:])",
                    "{o} = {a}.copy(); {o}[1:] /= 2.0 + {b}[1:] * {b}[1:]", 2),
    "base_write_then_old_view": ("{o}_b = {a}.clone(); {o}_v = {o}_b[..., :1]; "
                                 "{o}_b.mul_(3.0); {o} = {o}_v * 1.0",
                                 "{o}_b = {a}.copy(); {o}_v = {o}_b[..., :1]; "
                                 "{o}_b *= 3.0; {o} = {o}_v * 1.0", 1),
    # bools, ints and indexing
    "mask_times": ("{o} = ({a} > 0) * {a}", "{o} = ({a} > 0) * {a}", 1),
    "int_mix": ("{o} = {a} * ak.tensor(2) + ({a} > 0).long() - ak.tensor([1])",
                "{o} = {a} * np.int64(2) + ({a} > 0).astype(np.int64) - np.array([1])", 1),
    "where": ("{o} = ak.where({a} > 0, {a}, {a} * {a})",
              "{o} = np.where({a} > 0, {a}, {a} * {a})", 1),
    "setitem_mask": ("{o} = {a}.clone(); {o}[{a} > 0] = 0.0",
                     "{o} = {a}.copy(); {o}[{a} > 0] = 0.0", 1),
    "index_by_argmax": ("{o} = {a}[{a}.argmax(0)]", "{o} = {a}[np.argmax({a}, 0)]", 1),
    "gather_int": ("{o} = {a}[ak.tensor([0, 0, 1])]", "{o} = {a}[np.array([0, 0, 1])]", 1),
    "setitem_int": ("{o} = {a}.clone(); {o}[ak.tensor([0])] = {a}[-1:] * 2.0",
                    "{o} = {a}.copy(); {o}[np.array([0])] = {a}[-1:] * 2.0", 1),
    # gathers and scatter-adds at indices computed from the values (traced under jit;
    # argmax: in range whatever the values, as the batches of the vmap checks need)
    "gather_argmax": ("{o} = {a}.gather(0, {a}.argmax(0, keepdim=True))",
                      "{o} = np.take_along_axis({a}, np.argmax({a}, 0, keepdims=True), 0)", 1),
    "scatter_add_argmax": ("{o} = ({a} * 0.0).scatter_add(0, {a}.argmax(0, keepdim=True)"
                           ".expand_as({a}), {a} * 1.5)",  # every row into one: repeats add
                           "{o} = np.zeros_like({a}); np.add.at({o}, (np.broadcast_to("
                           "np.argmax({a}, 0, keepdims=True), {a}.shape),) + "
                           "tuple(np.indices({a}.shape))[1:], {a} * 1.5)", 1),
    "index_add_argmax": ("{o} = {a}.index_add(0, {a}.argmax(0).reshape(-1)[:1], {a}[:1] * 2.0)",
                         # one index for one source row, as index_add requires
                         "assert {a}.ndim >= 1 and {a}.shape[0] >= 1 and {a}.size >= 1; "
                         "{o} = {a}.copy(); np.add.at({o}, np.argmax({a}, 0).reshape(-1)[:1], "
                         "{a}[:1] * 2.0)", 1),
    "sort_values": ("{o} = {a}.sort(-1)[0]", "{o} = np.sort({a}, -1)", 1),
    "topk_values": ("{o} = {a}.topk(1)[0]",  # k > size is an error, as in PyTorch
                    "assert {a}.shape[-1] >= 1; {o} = -np.sort(-{a}, -1)[..., :1]", 1),
    "split_first": ("{o} = {a}.split(1, 0)[0]", "{o} = {a}[:1]", 1),
    # loops and branches (one node each under tracing: every transform goes through them)
    "scan_rows": ("{o} = ak.scan(lambda c, x: ((c * 0.5 + x).sin(), c * x), {a}[0] * 0.0, "
                  "{a})[1]",
                  "{o} = np_scan(lambda c, x: (np.sin(c * 0.5 + x), c * x), {a}[0] * 0.0, "
                  "{a})[1]", 1),
    "fori_tanh": ("{o} = ak.fori_loop(0, 3, lambda i, v: (v * 0.7).tanh() + {b} * 0.1, {a})",
                  "assert np.broadcast_shapes({a}.shape, {b}.shape) == {a}.shape; "  # carry rule
                  "{o} = np_fori(3, lambda v: np.tanh(v * 0.7) + {b} * 0.1, {a})", 2),
    "cond_square": ("{o} = ak.cond(({a} * {a}).sum() > 1.0, lambda v: v.sin(), "
                    "lambda v: v * 2.0, {a})",
                    "{o} = np.sin({a}) if ({a} * {a}).sum() > 1.0 else {a} * 2.0", 1),
    "cat_self": ("{o} = ak.cat([{a}, {a} * 2.0], 0)", "{o} = np.concatenate([{a}, {a} * 2.0], 0)",
                 1),
}

SHAPES = [(3, 4), (4,), (2, 3), (3, 1), (1, 4), (), (0, 4)]


@dataclasses.dataclass
class Program:
    """Inputs (numpy float arrays) and instructions; the outputs are the values named in
    `outputs` (float tensors)."""
    inputs: list
    steps: list  # (instruction name, output name, operand names)
    outputs: list

    def lines(self, lib):
        """The body as Python lines for `lib` ("ak" or "np")."""
        column = 0 if lib == "ak" else 1
        out = []
        for name, o, operands in self.steps:
            template = INSTRUCTIONS[name][column]
            names = dict(zip("ab", operands))
            out.extend(template.format(o=o, **names).split("; "))
            if lib == "np":  # numpy reductions give scalars: keep 0-d arrays, as adkit
                out.append(f"{o} = np.asarray({o})")
        return out

    def run(self, lib_module, values, lib="ak"):
        """Run on `values` (one per input) with `lib_module` as `ak` or `np`."""
        scope = {"ak": lib_module, "np": np} if lib == "ak" else \
            {"np": np, "np_scan": _np_scan, "np_fori": _np_fori}
        scope.update({f"x{i}": v for i, v in enumerate(values)})
        exec("\n".join(self.lines(lib)), scope)  # noqa: S102  (the program is ours)
        return [scope[o] for o in self.outputs]

    def source(self, dtype="float64"):
        """A runnable Python script that builds the inputs and runs the program."""
        head = ["import numpy as np", "import adkit as ak", ""]
        for i, x in enumerate(self.inputs):
            head.append(f"x{i} = ak.tensor(np.array({x.tolist()!r}, dtype=np.{dtype})"
                        f".reshape({tuple(x.shape)!r}))")
        body = self.lines("ak")
        return "\n".join(head + ["", "def program(" + ", ".join(
            f"x{i}" for i in range(len(self.inputs))) + "):"] +
            ["    " + line for line in body] +
            [f"    return {', '.join(self.outputs)}" + ("," if len(self.outputs) == 1 else "")])


def _np_scan(f, init, xs):
    """The numpy reference of ak.scan (for the loop instructions)."""
    carry, ys = init, []
    for x in xs:
        carry, y = f(carry, x)
        ys.append(y)
    return carry, np.stack(ys)


def _np_fori(n, f, value):
    for _ in range(n):
        value = f(value)
    return value


def random_input(rng, shape, dtype=np.float64):
    """Values in ±[0.2, 1.4], away from 0 and ±1 (kinks and ties sit there)."""
    magnitude = rng.uniform(0.2, 1.4, shape)
    magnitude[np.abs(magnitude - 1.0) < 0.1] += 0.25
    signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return np.asarray(signs * magnitude, dtype=dtype)  # 0-d: an array, not a numpy scalar


def generate(rng, n_steps=None, dtype=np.float64):
    """A random valid program: every instruction ran under numpy without error and made a
    float value of finite entries."""
    n_inputs = int(rng.integers(1, 3))
    inputs = [random_input(rng, SHAPES[int(rng.integers(len(SHAPES)))], dtype)
              for _ in range(n_inputs)]
    values = {f"x{i}": x for i, x in enumerate(inputs)}
    steps = []
    names = list(INSTRUCTIONS)
    for k in range(int(n_steps or rng.integers(1, 6))):
        for _ in range(20):  # tries for one instruction that numpy accepts
            name = names[int(rng.integers(len(names)))]
            operands = [list(values)[int(rng.integers(len(values)))]
                        for _ in range(INSTRUCTIONS[name][2])]
            step = (name, f"v{k}", operands)
            result = _try(Program(inputs, steps + [step], [f"v{k}"]), dtype)
            if result is not None:
                steps.append(step)
                values[f"v{k}"] = result
                break
    if not steps:
        return generate(rng, n_steps, dtype)
    return Program(inputs, steps, [steps[-1][1]])


def run_reference(program):
    """The program's numpy output (numpy's warnings about empty means are expected)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (out,) = program.run(np, [x.copy() for x in program.inputs], lib="np")
    return out


def _try(program, dtype):
    try:
        out = run_reference(program)
    except Exception:  # noqa: BLE001  (an invalid combination: try another)
        return None
    out = np.asarray(out)
    if out.dtype != dtype or not np.all(np.isfinite(out)) or np.any(np.abs(out) > 1e6):
        return None
    return out
