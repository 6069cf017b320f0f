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
    """The graph jit plans: `passes` (the user's) or, when None, OPTIMIZE's. With
    ADKIT_DUMP_IR on, the traced graph and each graph a stage changed are dumped (a
    dump's title lists the stages since the previous one)."""
    dumping = _config.dump_ir()
    last = str(graph) if dumping else None
    if dumping:
        _config.dump(f"{name} traced", last)
    stages = [(p, False) for p in OPTIMIZE.passes] if passes is None else \
        [(p, True) for p in passes]
    ran = []
    for p, is_user in stages:
        graph = _run_user_pass(p, graph, name) if is_user else p(graph)
        if dumping:
            ran.append(pass_name(p) if is_user else p.__name__.lstrip("_"))
            text = str(graph)
            if text != last:
                _config.dump(f"{name} after {', '.join(ran)}", text)
                last, ran = text, []
    return graph


__all__ = ["check_passes", "pass_name", "passes_key", "run_pipeline"]
