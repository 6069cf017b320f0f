"""The disk cache of plans (adkit/codegen/plan_cache.py): a second process's first call
finds the plan and code of a signature another process compiled, and makes no pass,
plan, IR or LLVM compile; the key separates shapes, dtypes and constants; damaged,
forged and stale entries are misses; concurrent writers leave whole entries; restored
plans compute what their originals do (fuzzer programs, gradients, pytrees, failed
index checks)."""
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import adkit as ak
from adkit.codegen import disk_cache, plan_cache, plan_codec
from adkit.codegen.compiled import Compiled
from adkit.codegen.deferred import Deferred, DeferredAttribute
from adkit.codegen.steps import SegmentStep
from adkit.ir.trace import trace_for
from adkit.testing import programs
from adkit.testing.fuzzer import program_function

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys, numpy as np, adkit as ak
from adkit.codegen import background, plan, plan_cache, runtime, tiered
# adkit's modules as they are: another process editing them meanwhile (a developer's
# checkout) would change the key (test_the_code_fingerprint_follows_every_module)
plan_cache.code_fingerprint = lambda: "this test's adkit"
if os.environ.get("FORBID_COMPILING"):  # a hit must make no pass, plan or code
    def forbidden(*args, **kwargs):
        raise AssertionError("compiled although the plan cache had it")
    sys.modules["adkit.codegen.jit"].run_pipeline = forbidden
    tiered.run_pipeline = forbidden
    plan.Planner.__init__ = forbidden
    runtime.optimized_object = runtime.quick_object = forbidden
mode = os.environ["JIT_MODE"]
rng = np.random.default_rng(0)
x = ak.tensor(rng.standard_normal((300, 40)))
w = ak.tensor(rng.standard_normal((40, 40)))
c = np.linspace(0.5, 1.5, 40)  # closed over: a constant of the graph

def loss(w, x):
    h = (x @ w).tanh() * ak.tensor(c)
    return (h.exp().sum(1).log() ** 2).mean()

fns = {
    "elementwise": (ak.jit(lambda t: ((t * 2.0).exp() + 1.0).tanh(), compile=mode), (x,)),
    "gradient": (ak.jit(ak.func.grad_and_value(loss), compile=mode), (w, x)),
    "pytree": (ak.jit(lambda t: {"s": t.sum(0), "n": (t > 0).sum(), "k": 3},
                      compile=mode), (x,)),
    "gather": (ak.jit(lambda t, i: t[i] * 2.0, compile=mode),
               (x, ak.tensor(np.array([0, 5, 299])))),
}
for name, (f, args) in fns.items():
    f(*args)
    out = f(*args)
    leaves = ak._pytree.tree_flatten(out)[0]
    total = sum(float(np.asarray(l.numpy() if hasattr(l, "numpy") else l).sum())
                for l in leaves)
    print(name, repr(total), f.compile(*args).plan_key is not None)
try:
    fns["gather"][0](x, ak.tensor(np.array([0, 300, 1])))
except IndexError as e:
    print("index-error", "index 300 is out of bounds" in str(e))
background.wait()
"""


def _run(cache, mode="background", forbid=False):
    env = {**os.environ, "ADKIT_CACHE_DIR": str(cache), "JIT_MODE": mode}
    env.pop("ADKIT_DISABLE_CACHE", None)
    if forbid:
        env["FORBID_COMPILING"] = "1"
    return subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines(process):
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out.splitlines()


@pytest.mark.parametrize("mode", ["background", "eager"])
def test_a_second_process_compiles_nothing(tmp_path, mode):
    first = _lines(_run(tmp_path, mode))
    second = _lines(_run(tmp_path, mode, forbid=True))
    assert second[4:] == ["index-error True"]
    for a, b in zip(first[:4], second[:4]):
        assert a.split()[:2] == b.split()[:2] and b.endswith("True")
    assert list(tmp_path.rglob("*.plan")) and not list(tmp_path.rglob("*.tmp"))


def test_concurrent_writers_leave_whole_entries(tmp_path):
    writers = [_run(tmp_path, "eager"), _run(tmp_path, "eager")]
    results = [_lines(p) for p in writers]
    assert results[0][:4] == results[1][:4]
    assert _lines(_run(tmp_path, forbid=True))[:4] == results[0][:4]
    assert not list(tmp_path.rglob("*.tmp"))


# ----------------------------------------------------------------------- in process
@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ADKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ADKIT_DISABLE_CACHE", raising=False)
    return tmp_path


def _key(f, *args):
    return plan_cache.key(trace_for("test", f, args, {}), None)


def test_the_key_separates_shapes_dtypes_constants_and_functions(cache):
    x = ak.tensor(np.ones((3, 4)))

    def double(t):
        return t * 2.0
    k = _key(double, x)
    assert k == _key(double, ak.tensor(np.zeros((3, 4))))  # the arguments' values: no
    assert k != _key(double, ak.tensor(np.ones((4, 3))))
    assert k != _key(double, ak.tensor(np.ones((3, 4), np.float32)))
    assert k != _key(lambda t: t * 2.0, x)  # the line ops were traced at (errors name it)
    assert k != _key(lambda t: t * 3.0, x)
    assert k != _key(lambda t: t + 2.0, x)
    one, other = np.ones(4), np.ones(4)
    other[2] = 1.5
    assert _key(lambda t: t * ak.tensor(one), x) != _key(lambda t: t * ak.tensor(other), x)
    assert _key(lambda t: t.sum(0), x) != _key(lambda t: t.sum(1), x)


def test_the_key_of_a_gradient_does_not_depend_on_where_it_is_called(cache):
    # the backward's ops are made by the autograd engine, below no line of the traced
    # function: the line calling the jitted function used to be their source
    def f(t):
        return (t.sin() * t).sum()
    grad, x = ak.func.grad(f), ak.tensor(np.ones(3))
    graph_here = trace_for("test", grad, (x,), {})
    graph_there = trace_for("test", grad, (x,), {})
    sources = {data.get("source") for _, data in graph_here.nx.nodes(data=True)}
    assert sources - {None} == {f"test_jit_plan_cache.py:{f.__code__.co_firstlineno + 1}"}
    assert plan_cache.key(graph_here, None) == plan_cache.key(graph_there, None)


def test_the_digest_writes_plain_edges_as_any_edge():
    from adkit.codegen import plan_digest
    g = nx.MultiDiGraph()
    g.add_edge(0, 1, pos=0, out=0)
    g.add_edge(0, 1, pos=1, out=2)
    texts = plan_digest._Texts()
    one_by_one = ";".join(f"{texts.text(u)}>{texts.text(v)}#{texts.text(k)}"
                          f"{texts._dict(d)}" for u, v, k, d in g.edges(keys=True, data=True))
    assert plan_digest._Texts()._nx(g) == f"@X{{}}<0={{}};1={{}}|{one_by_one}>"
    g.add_edge(1, 2, pos=np.int64(0))  # not plain: written item by item
    assert "np" not in plan_digest._Texts()._nx(g) and "@G" in plan_digest._Texts()._nx(g)


def test_equal_arrays_are_stored_once_and_read_back_apart():
    one, same, zeros = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3), np.zeros(1)
    text, later, blobs = plan_codec.encode([one, same, zeros, np.zeros(1, np.int64)])
    assert len(blobs) == 2  # (0.0 and the int 0 have the same 8 bytes)
    back = plan_codec.decode(text, blobs, later)
    assert [a.dtype for a in back] == [np.float64, np.float64, np.float64, np.int64]
    np.testing.assert_array_equal(back[1], same)
    back[0][0, 0] = 7.0  # each array its own memory
    assert back[1][0, 0] == 0.0


def test_what_is_not_cached(cache, monkeypatch):
    x = ak.tensor(np.ones(3))
    assert plan_cache.key(trace_for("test", lambda t: t * 2.0, (x,), {}), (abs,)) is None
    p = ak.tensor(np.ones(3), requires_grad=True)
    assert _key(lambda t: t * p, x) is None  # reads a parameter live
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")
    assert _key(lambda t: t * 2.0, x) is None


def _stored(f, *args):
    """(key, the Compiled made, the one the cache gives back)."""
    compiled = ak.jit(f, compile="eager").compile(*args)
    k = _key(f, *args)
    plan_cache.store(k, compiled)
    return k, compiled, plan_cache.load(k)


def test_damaged_forged_and_stale_entries_are_misses(cache):
    x = ak.tensor(np.linspace(-1, 1, 50))
    k, _, restored = _stored(lambda t: (t * 2.0).sin(), x)
    assert isinstance(restored, Compiled)
    path = next(cache.rglob("*.plan"))
    data = path.read_bytes()
    path.write_bytes(data[:-10] + b"0123456789")  # its sha256 no longer matches
    assert plan_cache.load(k) is None

    def forge(plan, graphs=b"[]", blobs=(), head=None):
        head = head or {"format": plan_cache.FORMAT, "native": 0, "blobs": len(blobs),
                        "blas": False, "pool": False}
        chunks = [json.dumps(head).encode(), plan, graphs, *blobs]
        header = np.array([len(chunks), *map(len, chunks)], "<u8").tobytes()
        disk_cache.store(k, [header, *chunks], ".plan", plan_cache._MAGIC)
    # an entry naming a class outside adkit, which must never be called
    forge(b'["o", 0, ["c", 1, "os", "system"], ["k", 0]]')
    assert plan_cache.load(k) is None
    forge(b'["o", 0, ["t", 1], ["k", 0]]')  # an object of something that is not a class
    assert plan_cache.load(k) is None
    forge(b'["o", 0, ["c", 1, "adkit.codegen.buffers", "TempBuffer"], ["k", 0, "a"]]')
    assert plan_cache.load(k) is None  # attributes it does not have values for
    forge(b'["l", 0, [["r", 5]]]')  # a reference to nothing
    assert plan_cache.load(k) is None
    text, graphs, blobs = plan_codec.encode({"state": {}})
    forge(text.encode(), graphs.encode(), blobs, head={"format": "adkit-plan-0",
                                                        "native": 0, "blobs": 0})
    assert plan_cache.load(k) is None  # an older format
    forge(text.encode(), graphs.encode(), [b"1"], head={"format": plan_cache.FORMAT,
                                                         "native": 0, "blobs": 0})
    assert plan_cache.load(k) is None  # chunks its header does not count


def test_a_forged_graph_is_never_run_and_never_read(cache, monkeypatch):
    """The plan's graphs are read when first used (plan_codec._Unread): what a forged
    entry puts there is refused then, and its classes never called."""
    x = ak.tensor(np.linspace(-1, 1, 50))
    k, compiled, _ = _stored(lambda t: (t * 2.0).sin(), x)
    path = next(cache.rglob("*.plan"))
    data = disk_cache.load(k, ".plan", plan_cache._MAGIC)
    head, text, _, blobs, objects, texts = plan_cache._split(data)
    graph = dict(json.loads(text)[2])["graph"]  # ["o", i, class, ["k", j, *names], *values]
    index = dict(zip(graph[3][2:], graph[4:]))["nx"][1]  # ["x", i]: read from the graphs' text
    called = []
    monkeypatch.setattr(os, "system", lambda *a: called.append(a))
    for graphs in (f'[[{index}, ["o", 9999, ["c", 9998, "os", "system"], ["k", 99]], '
                   '{}, {}, {}]]', '[]', '[[0, {}, {}, {}, {}]]'):
        chunks = [json.dumps(head).encode(), text.encode(), graphs.encode(),
                  *map(bytes, [*blobs, *objects, *texts])]
        header = np.array([len(chunks), *map(len, chunks)], "<u8").tobytes()
        disk_cache.store(k, [header, *chunks], ".plan", plan_cache._MAGIC)
        restored = plan_cache.load(k)
        _same(restored.run_checked([x]), compiled(x))  # (jit's calls: no graph read)
        _same(restored(x), compiled(x))  # (input checks by the stored specs: no read)
        with pytest.raises(TypeError, match="input 0"):
            restored(ak.tensor(np.zeros(3)))
        with pytest.raises(ValueError, match="graph"):
            len(restored.graph.nx)
        with pytest.raises(ValueError, match="graph"):  # and says so each time
            restored.graph.nx.nodes
        with pytest.raises(ValueError, match="the plan's"):  # (kernels wait with graphs)
            restored.kernels
    assert not called and path.exists()


def test_the_code_fingerprint_follows_every_module(tmp_path):
    for name in ("a.py", "sub/b.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    before = plan_cache.directory_fingerprint(str(tmp_path))
    os.utime(tmp_path / "sub/b.py", ns=(1, 1))
    assert plan_cache.directory_fingerprint(str(tmp_path)) != before


def _same(a, b):
    a, b = ak._pytree.tree_flatten(a)[0], ak._pytree.tree_flatten(b)[0]
    assert len(a) == len(b)
    for u, v in zip(a, b):
        u, v = np.asarray(u.numpy() if hasattr(u, "numpy") else u), \
            np.asarray(v.numpy() if hasattr(v, "numpy") else v)
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(u, v)


def test_restored_plans_compute_what_their_originals_do(cache):
    rng = np.random.default_rng(0)
    x, w = ak.tensor(rng.standard_normal((64, 32))), ak.tensor(rng.standard_normal((32, 8)))

    def mlp(w, x):
        return ((x @ w).tanh() ** 2).mean()
    cases = [
        (ak.func.grad(mlp), (w, x)),
        (lambda t: (ak.sort(t, 1)[0].exp(), t.argmax(1), t > 0), (x,)),  # numpy steps
        (lambda t: t.t()[3:], (x,)),  # a view of the input: copied out
        (lambda t, i: t[i].exp(), (x, ak.tensor(np.array([1, 63, 0])))),
    ]
    for f, args in cases:
        _, compiled, restored = _stored(f, *args)
        assert restored is not None and restored.plan_key is not None
        _same(restored(*args), compiled(*args))
        _same(restored(*args), compiled(*args))  # the reused buffers too
    with pytest.raises(IndexError, match="out of bounds"):
        restored(x, ak.tensor(np.array([1, 64, 0])))


def test_fuzzer_programs_round_trip(cache):
    rng = np.random.default_rng(7)
    stored = 0
    for _ in range(40):
        program = programs.generate(rng)
        f = program_function(program)
        args = [ak.tensor(a) for a in program.inputs]
        _, compiled, restored = _stored(f, *args)
        if restored is None:  # a plan holding something that is not data
            continue
        stored += 1
        _same(restored(*args), compiled(*args))
    assert stored >= 30


def test_concurrent_stores_in_one_process(cache):
    x = ak.tensor(np.linspace(0, 1, 100))
    f = ak.jit(lambda t: t.exp() * 3.0, compile="eager")
    compiled, k = f.compile(x), _key(lambda t: t.exp() * 3.0, x)
    threads = [threading.Thread(target=plan_cache.store, args=(k, compiled))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _same(plan_cache.load(k)(x), compiled(x))
    assert hashlib.sha256(next(cache.rglob("*.plan")).read_bytes()).digest()
    assert not list(cache.rglob("*.tmp"))


def test_restored_graphs_are_read_when_first_used(cache):
    """A hit's graphs wait in their entry until something uses them (plan_codec's
    _Unread); then they are plain networkx graphs holding what was stored, read once
    however many threads ask."""
    rng = np.random.default_rng(1)
    x, w = ak.tensor(rng.standard_normal((16, 8))), ak.tensor(rng.standard_normal((8, 4)))
    _, compiled, restored = _stored(ak.func.grad(lambda w, x: (x @ w).tanh().sum()), w, x)
    _same(restored(w, x), compiled(w, x))  # a call checks inputs by the stored specs
    assert type(restored.graph.__dict__["nx"]) is not nx.MultiDiGraph  # not read yet
    graphs = []
    threads = [threading.Thread(target=lambda: graphs.append(list(
        restored.graph.nx.nodes(data="kind")))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert type(restored.graph.nx) is nx.MultiDiGraph
    assert graphs == [list(compiled.graph.nx.nodes(data="kind"))] * 4
    assert plan_codec.digest(restored.graph) == plan_codec.digest(compiled.graph)
    _same(restored(w, x), compiled(w, x))  # (a call through the graph's input checks)


def test_kernels_and_native_calls_are_read_when_first_used(cache):
    """A hit's kernels and native calls (what its code was made from, most of a plan)
    wait with its graphs (deferred.py): calls run on the steps' entry points alone, and
    a first use reads them back as the original had them."""
    rng = np.random.default_rng(2)
    x, w = ak.tensor(rng.standard_normal((64, 8))), ak.tensor(rng.standard_normal((8, 4)))
    _, compiled, restored = _stored(ak.func.grad(lambda w, x: (x @ w).tanh().sum()), w, x)
    segments = [step for step in restored.steps if isinstance(step, SegmentStep)]
    assert segments
    _same(restored(w, x), compiled(w, x))
    for held in (restored.__dict__, *(step.__dict__ for step in segments)):
        assert any(type(v) is Deferred for v in held.values())  # still not read
    assert [k.name for k in restored.kernels] == [k.name for k in compiled.kernels]
    assert [[type(c).__name__ for c in calls] for calls in restored.segment_calls] == \
        [[type(c).__name__ for c in calls] for calls in compiled.segment_calls]
    assert all(step.calls is calls for step, calls in zip(segments, restored.segment_calls))
    assert restored.kernels is restored.kernels  # read once, then an attribute
    assert type(restored.graph.nx) is nx.MultiDiGraph  # read with them
    _same(restored(w, x), compiled(w, x))


def test_an_entry_in_memory_is_what_the_file_holds(cache, monkeypatch):
    """plan_cache.entry / restored: the bytes write() puts in the file (after its magic
    and sha256), read back without a file; quick code has no entry."""
    x = ak.tensor(np.linspace(-2, 2, 40))
    k, compiled, _ = _stored(lambda t: (t * t).exp().sum(), x)
    chunks = plan_cache.entry(compiled)
    assert b"".join(chunks) == disk_cache.load(k, ".plan", plan_cache._MAGIC)
    _same(plan_cache.restored(b"".join(chunks))(x), compiled(x))
    assert plan_cache.restored(b"".join(chunks)[:-1]) is None  # damaged: not a plan
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")  # (no optimized code found for it)
    quick = Compiled(compiled.graph, "quick", quick=True)
    assert not quick.optimized and plan_cache.entry(quick) is None


def test_a_deferred_attribute_reads_its_value_once():
    class Holder:
        value = DeferredAttribute()
    h, reads = Holder(), []
    with pytest.raises(AttributeError, match="value"):
        h.value
    assert not hasattr(h, "value")
    h.value = Deferred(lambda: reads.append(1) or [1, 2])
    assert h.value == [1, 2] and h.value is h.value and reads == [1]
    h.value = 3
    assert h.value == 3


def test_the_digest_names_values_exactly():
    """Different data, different digests (types, values, order, nesting); equal data,
    equal digests, however it is shared or a set is ordered."""
    from adkit.ir.graph import Value
    from adkit.ir.rules import TensorSpec
    values = [1, 1.0, True, "1", b"1", None, 0, 0.0, -0.0, float("nan"), 1j, (1,), [1],
              {1: 1}, {"1": 1}, {1.0: 1}, {True: 1}, (1, 2), (2, 1), (1, (2,)), ((1,), 2),
              [(1,)], ([1],), {1}, frozenset({1}), slice(1), slice(1, None), ...,
              np.float64(1), np.float32(1), np.int64(1), np.dtype("f8"), np.dtype("f4"),
              np.ones(2), np.ones(2, np.float32), np.ones((2, 1)), np.zeros(2), ak.float64,
              ak.float32, TensorSpec((2,), ak.float64), ((2,), ak.float64),
              TensorSpec((2,), ak.float32), Value(1, 0), (1, 0), ak.tensor(np.ones(2)),
              "@Dfloat64", "a, b", ("a", "b"), ("a, b",), {"a": (1,)}, {"a": 1, "b": 2},
              {"b": 2, "a": 1}, nx.MultiDiGraph(), ak.ops.unary.Exp, ak.ops.unary.Log]
    digests = [plan_codec.digest(v) for v in values]
    assert len(set(digests)) == len(values)

    def make():
        shared = [np.arange(3.0), {"k": (1, 2.5, None)}]
        return {"s": {"b", "a", "c"}, "x": (shared, shared), "t": TensorSpec((3,), ak.int64)}
    one, other = make(), make()
    other["s"] = {"c", "a", "b"}
    other["x"] = (other["x"][0], list(other["x"][0]))  # equal, not shared
    assert plan_codec.digest(one) == plan_codec.digest(other)


def test_what_the_digest_refuses():
    class Mine:
        pass
    cycle = []
    cycle.append(cycle)
    for value in (lambda: 0, Mine(), Mine, cycle, np.array([None]),
                  ak.tensor(np.ones(2), requires_grad=True)):
        with pytest.raises(plan_codec.NotData):
            plan_codec.digest(value)


FORK = """
import os, sys, numpy as np
import adkit as ak
pid = os.fork()  # at once, then the child uses LLVM
if pid == 0:
    f = ak.jit(lambda t: (t * 2.0).exp(), compile="eager")
    os._exit(0 if np.allclose(f(ak.tensor(np.ones(3))).numpy(), np.exp(2.0)) else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_fork_right_after_import_compiles(tmp_path):
    env = {**os.environ, "ADKIT_CACHE_DIR": str(tmp_path)}
    env.pop("ADKIT_DISABLE_CACHE", None)
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", FORK], cwd=ROOT, env=env, text=True,
                             capture_output=True, timeout=120)
        assert out.returncode == 0 and out.stdout.split() == ["0"], out.stderr


def test_concurrent_loads_in_one_process(cache):
    """Each load links on a thread of its own (pool and libraries loaded once)."""
    rng = np.random.default_rng(2)
    x, w = ak.tensor(rng.standard_normal((64, 32))), ak.tensor(rng.standard_normal((32, 8)))
    k, compiled, _ = _stored(ak.func.grad(lambda w, x: ((x @ w).tanh() ** 2).mean()), w, x)
    loaded = []
    threads = [threading.Thread(target=lambda: loaded.append(plan_cache.load(k)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loaded) == 6 and len({id(c) for c in loaded}) == 6
    for restored in loaded:
        _same(restored(w, x), compiled(w, x))
