"""Repository hygiene: the import direction of DESIGN.md and a file-size budget.

Layers, lowest first: dtypes/_hooks/_config -> tensor -> _dispatch -> autograd -> ops -> nn/func
-> ir/control -> codegen -> testing -> the package front (adkit/__init__, __main__, _demo). A module imports
only from its own layer or below. Imports inside functions are allowed only when marked
`# upward call (see tests/test_layering.py)` and listed in UPWARD_CALLS.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "adkit"
LAYERS = [
    (("adkit.dtypes", "adkit._hooks", "adkit._config"), 0),
    (("adkit.tensor", "adkit._tensor_html", "adkit.interop"), 1),
    (("adkit._dispatch",), 2),
    (("adkit.autograd",), 3),
    (("adkit.ops",), 4),
    (("adkit.nn", "adkit.func", "adkit._pytree"), 5),
    (("adkit.ir", "adkit.control"), 6),
    (("adkit.codegen",), 7),
    (("adkit.testing",), 8),
    (("adkit", "adkit.__main__", "adkit._demo"), 9),
]
MARKER = "# upward call (see tests/test_layering.py)"
UPWARD_CALLS = {  # (importing module, imported module)
    ("adkit.tensor", "adkit.autograd.engine"),  # Tensor.backward runs the engine
    ("adkit.tensor", "adkit.autograd.grad_mode"),  # numpy() is allowed under no_grad
    ("adkit.tensor", "adkit.interop"),  # DLPack, pickle and copy of a tensor
    ("adkit.autograd.gradcheck", "adkit.func"),  # check_batched_grad runs ak.func.vmap
    ("adkit.func.sparse", "adkit.ir.trace"),  # sparse_jacobian traces f for its pattern
    ("adkit.func.sparse", "adkit.ir.passes"),  # ... and detects and colors it there
    ("adkit.func.jacobian", "adkit.ir.trace"),  # mode="auto" costs f's traced graph
    ("adkit.func.jacobian", "adkit.ir.rules"),  # ... whose output specs are TensorSpecs
    ("adkit.ir.passes", "adkit.codegen.compiled"),  # DEFAULT_PIPELINE is jit's pipeline
}
HARD_LINE_CAP = 800


def _rank(module):
    best, rank = "", None
    for prefixes, r in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > len(best):
                best, rank = p, r
    return rank


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), path, is_pkg


def _imports(module, tree, is_pkg):
    """(imported module, line, inside a function?) for every adkit import."""
    package = module if is_pkg else module.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names
                             if a.name.split(".")[0] == "adkit")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "adkit":
                    names = [target + "." + a.name for a in child.names]
                    # `from . import ops` imports a submodule: judge by the submodule
                    found.extend((n if _is_module(n) else target, child.lineno, in_function)
                                 for n in names)
            visit(child, inner)

    visit(tree, False)
    return found


def _is_module(name):
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_layering_imports_go_downward_only():
    problems = []
    for module, path, is_pkg in _modules():
        rank = _rank(module)
        assert rank is not None, f"{module} is in no layer: add it to LAYERS"
        lines = path.read_text().splitlines()
        for target, lineno, in_function in _imports(module, ast.parse(path.read_text()), is_pkg):
            if in_function:
                if MARKER not in lines[lineno - 1] or (module, target) not in UPWARD_CALLS:
                    problems.append(f"{path.name}:{lineno}: import of {target} inside a "
                                    "function (not an allow-listed upward call)")
            elif _rank(target) > rank:
                problems.append(f"{path.name}:{lineno}: {module} (layer {rank}) imports "
                                f"{target} (layer {_rank(target)})")
    assert not problems, "\n".join(problems)


def test_layering_file_size_budget():
    sizes = sorted(((len(p.read_text().splitlines()), m) for m, p, _ in _modules()),
                   reverse=True)
    print("largest modules:", ", ".join(f"{m} {n}" for n, m in sizes[:5]))
    too_big = [(m, n) for n, m in sizes if n > HARD_LINE_CAP]
    assert not too_big, f"modules over {HARD_LINE_CAP} lines: {too_big}"


@pytest.mark.parametrize("bad", ["x = 1\ndef f():\n    from adkit import ops\n"])
def test_layering_checker_catches_function_level_imports(bad):
    found = _imports("adkit.tensor", ast.parse(bad), False)
    assert found and found[0][2] is True
