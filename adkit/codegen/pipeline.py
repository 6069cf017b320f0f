"""The passes between a jitted function's trace and its plan, in order: `OPTIMIZE`
(inlining, simplification, decomposition, clean-up, fusion; `ak.ir.passes.
DEFAULT_PIPELINE`), or the user's own list instead (`ak.jit(f, passes=[...])`, which
replaces the default as API.md says: `passes=[my_pass, *DEFAULT_PIPELINE]` keeps it).

Owns: `run_pipeline` (running both, naming the user's pass in any error it raises or
causes, and dumping the graph after every stage when ADKIT_DUMP_IR is on), and
`passes_key` (how a list of passes enters jit's cache key). Does not: hold passes
(adkit/ir/passes, compiled.OPTIMIZE) or read environment variables (adkit/_config.py).
NB: user passes see the graph after tracing and autodiff (a jit of `ak.func.grad(f)` hands
them the whole gradient graph; a jitted function under grad hands them each derived
graph it compiles). Code is generated for whatever graph the list leaves: without
`fuse`, elementwise ops run one native kernel each or through numpy.
"""
from .. import _config
from ..ir import Graph, GraphError
from ..ir.passes.editing import apply_passes
from .compiled import OPTIMIZE


def pass_name(p):
    """A pass as an error or a dump names it: module.qualname where it has them."""
    qualname = getattr(p, "__qualname__", None) or getattr(p, "__name__", None)
    if qualname is None:
        return repr(p)
    module = getattr(p, "__module__", None)
    return f"{module}.{qualname}" if module and module != "__main__" else qualname


def passes_key(passes):
    """What jit's cache key holds of its passes: each pass by identity (two lambdas
    share a qualname), with the qualname to read; None for the default pipeline."""
    return None if passes is None else tuple((pass_name(p), id(p)) for p in passes)


def check_passes(passes):
    """`passes` as a tuple of callables (None: the default pipeline), or TypeError
    saying what a pass is."""
    if passes is None:
        return None
    if callable(passes) or isinstance(passes, (str, bytes)):
        raise TypeError("ak.jit(passes=...) takes a list of passes (functions Graph -> "
                        f"Graph), not one {type(passes).__name__}: write passes=[my_pass]")
    passes = tuple(passes)
    for i, p in enumerate(passes):
        if not callable(p):
            raise TypeError(f"ak.jit(passes=...): item {i} is {type(p).__name__} {p!r}, "
                            "not a pass (a function Graph -> Graph)")
    return passes


def _run_user_pass(p, graph, name):
    """p(graph), its result checked: any error names the pass and the function."""
    where = f"the pass {pass_name(p)}, given to {name[:-1]}, passes=[...])"
    try:
        result = p(graph)
    except Exception as e:
        message = f"{where} raised {type(e).__name__}: {e}"
        try:
            error = type(e)(message)
        except Exception:
            error = RuntimeError(message)
        raise error from e  # the pass is user code: its own traceback stays
    if not isinstance(result, Graph):
        raise TypeError(f"{where} returned {type(result).__name__}, not a Graph (a pass "
                        "returns the new graph: `g = graph.copy(); ...; return g`)")
    try:
        result.validate()
    except GraphError as e:
        raise GraphError(f"{where} returned a graph that does not validate: {e}") from None
    return result


def run_pipeline(graph, passes=None, name="jitted function"):
    """The graph jit plans: `passes` (the user's) or, when None, OPTIMIZE's (their
    in-place forms editing one copy of `graph`: passes.editing.apply_passes). With
    ADKIT_DUMP_IR on, the traced graph and each graph a stage changed are dumped (a
    dump's title lists the stages since the previous one). `graph` is left as it was."""
    dump = _Dumps(graph, name) if _config.dump_ir() else None
    if passes is None:
        return apply_passes(OPTIMIZE.passes, graph,
                            after=None if dump is None else dump.after)
    for p in passes:
        graph = _run_user_pass(p, graph, name)
        if dump is not None:
            dump.after(p, graph, pass_name(p))
    return graph


class _Dumps:
    """ADKIT_DUMP_IR's dumps of one pipeline run: each text that differs from the last."""

    def __init__(self, graph, name):
        self.name, self.last, self.ran = name, str(graph), []
        _config.dump(f"{name} traced", self.last)

    def after(self, p, graph, label=None):
        self.ran.append(label or p.__name__.lstrip("_"))
        text = str(graph)
        if text != self.last:
            _config.dump(f"{self.name} after {', '.join(self.ran)}", text)
            self.last, self.ran = text, []


__all__ = ["check_passes", "pass_name", "passes_key", "run_pipeline"]
