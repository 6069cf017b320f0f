"""examples/bench.ipynb runs top to bottom in a real Jupyter kernel (nbclient +
ipykernel), and each tagged cell shows what it should. Skipped, saying why, where the
notebook packages are missing."""
import importlib.util
import os
from pathlib import Path

import pytest

from adkit.ir import printing

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat "
                               "(in the test extra)")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient "
                               "(in the test extra)")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ipykernel") is None,
                                reason="the notebook test needs ipykernel (in the test "
                                       "extra) to run a Python kernel")

ROOT = Path(__file__).resolve().parent.parent


def _renderer_installed():
    return printing.to_svg(_tiny_graph()) is not None


def _tiny_graph():
    import adkit as ak
    return ak.trace(lambda a: ak.exp(a), ak.ones(2))


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.read(ROOT / "examples" / "bench.ipynb", as_version=4)
    env_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"], old = env_path, os.environ.get("PYTHONPATH")
    try:  # the kernel imports this checkout's adkit, installed or not
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    return {tag: cell for cell in nb.cells for tag in cell.metadata.get("tags", [])}


def _data(cell):
    """The rich output of a cell (its execute_result), by MIME type."""
    results = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert results, f"no result shown by: {cell.source}"
    return results[-1].data


def test_notebook_runs_without_errors(executed):
    for tag, cell in executed.items():
        assert not [o for o in cell.outputs if o.output_type == "error"], tag


def test_notebook_shows_a_tensor_as_a_table(executed):
    data = _data(executed["tensor"])
    assert "adkit-tensor" in data["text/html"] and "(4, 5)" in data["text/html"]
    assert "requires_grad=True" in data["text/html"]
    assert data["text/plain"].startswith("tensor(")


def test_notebook_shows_forward_and_backward_graphs(executed):
    for tag, op in (("forward", "tanh"), ("backward", "matmul")):
        data = _data(executed[tag])
        html = data["text/html"]
        assert "adkit-graph" in html and op in html
        if _renderer_installed():
            assert "<svg" in html and "<svg" in data["image/svg+xml"]
        else:
            assert "<pre" in html and "image/svg+xml" not in data


def test_notebook_shows_compiled_code_behind_triangles(executed):
    data = _data(executed["compiled"])
    html = data["text/html"]
    for part in ("adkit-compiled", "<details", "LLVM IR", "assembly", "kernel0",
                 "define "):
        assert part in html, part
    assert data["text/plain"].startswith("<adkit Compiled (f32[3,4], f32[4,5]) -> f32[4,5]")
    jitted = _data(executed["jitted"])
    assert "1 signature compiled" in jitted["text/plain"]
    assert "adkit-jitted" in jitted["text/html"]


def test_notebook_writes_the_viewer_page(executed):
    path = "".join(o.get("text", "") for o in executed["viewer"].outputs).strip()
    text = Path(path).read_text()
    assert path.endswith("bench.html") and "adkit-data" in text and "<svg" in text
