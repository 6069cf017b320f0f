"""The reverse-mode engine: `backward()` and `grad()`.

Owns: walking the backward graph from the roots in dependency order, iteratively (no
recursion, linear time), summing gradients per node output, tensor/node hooks,
capturing gradients for `grad(inputs=...)`, accumulating into leaves, freeing saved
tensors unless `retain_graph`. Does not: know any op (nodes run their own rules).
Order: a ready node with the highest sequence number runs first (PyTorch's order).
"""
import heapq
import threading
import warnings

import numpy as np

from ..tensor import Tensor, _make
from . import anomaly_mode
from .grad_mode import STATE
from .node import NOT_TENSOR, AccumulateGrad, accumulate_into, gradient_edge


class _EngineState(threading.local):
    def __init__(self):
        self.checkpoint_valid = True


_ENGINE = _EngineState()


def _make_grads(outputs, grads):
    """Check or create the gradient for each output (PyTorch's _make_grads). Extra
    gradients are ignored and too few are an error, as in PyTorch."""
    if len(grads) < len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    new_grads = []
    for i, (out, grad) in enumerate(zip(outputs, grads)):
        if isinstance(grad, Tensor):
            if out.shape != grad.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{grad.shape} and output[{i}] has a shape of "
                                   f"{out.shape}.")
            new_grads.append(grad)
        elif grad is None:
            if out.requires_grad:
                if out.numel() != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar "
                                       "outputs")
                new_grads.append(_make(np.ones(out._data.shape, out._data.dtype)))
            else:
                new_grads.append(None)
        else:
            raise TypeError("gradients can be either Tensors or None, but got "
                            + type(grad).__name__)
    return tuple(new_grads)


def _as_tuple(x):
    return (x,) if isinstance(x, Tensor) else tuple(x)


def _grads_list(grads, n):
    if grads is None:
        return [None] * n
    if isinstance(grads, Tensor):
        return [grads]
    return list(grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None):
    """Accumulate into the leaves' `.grad` the gradient of `tensors` (weighted by
    `grad_tensors`); with `inputs`, only into those tensors."""
    if grad_variables is not None:
        warnings.warn("'grad_variables' is deprecated. Use 'grad_tensors' instead.",
                      stacklevel=2)
        if grad_tensors is None:
            grad_tensors = grad_variables
        else:
            raise RuntimeError("'grad_tensors' and 'grad_variables' (deprecated) arguments "
                               "both passed to backward(). Please only use 'grad_tensors'.")
    if inputs is not None:
        inputs = _as_tuple(inputs)
        if len(inputs) == 0:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    tensors = _as_tuple(tensors)
    grads = _make_grads(tensors, _grads_list(grad_tensors, len(tensors)))
    if retain_graph is None:
        retain_graph = create_graph
    run_backward(tensors, grads, retain_graph, create_graph, inputs, allow_unused=True,
                 accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False,
         materialize_grads=False):
    """Return the gradients of `outputs` with respect to `inputs` (nothing accumulates
    into `.grad`)."""
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True). To accumulate gradient for other parts of the graph, please "
                      "use torch.autograd.backward.", stacklevel=2)
    if is_grads_batched:
        raise RuntimeError("is_grads_batched=True needs ak.func.vmap, which adkit does not "
                           "provide yet; loop over the grad_outputs instead")
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _as_tuple(outputs)
    inputs_tuple = _as_tuple(inputs)
    grads = _make_grads(outputs, _grads_list(grad_outputs, len(outputs)))
    if retain_graph is None:
        retain_graph = create_graph
    result = run_backward(outputs, grads, retain_graph, create_graph, inputs_tuple,
                          allow_unused, accumulate=False)
    if materialize_grads:
        result = tuple(_make(np.zeros(t._data.shape, t._data.dtype)) if g is None else g
                       for g, t in zip(result, inputs_tuple))
    return result


def _is_checkpoint_valid():
    """False while the engine runs for `grad()` (gradients are not accumulated into
    leaves then, so checkpointing that relies on `.grad` cannot work)."""
    return _ENGINE.checkpoint_valid


# ---------------------------------------------------------------- the walk
def run_backward(roots, root_grads, keep_graph, create_graph, inputs, allow_unused,
                 accumulate):
    """Run the graph from `roots`. With `accumulate` (backward()), gradients go into
    `.grad` (of every leaf, or of `inputs` only); otherwise they are returned for
    `inputs`."""
    root_edges = []
    for i, (t, g) in enumerate(zip(roots, root_grads)):
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
        root_edges.append((gradient_edge(t), g))
    captures = _capture_points(inputs, accumulate) if inputs is not None else None
    root_nodes = [e[0][0] for e in root_edges]
    if captures is None:
        (order, deps), needed = _count_dependencies(root_nodes), None
    else:
        order, deps, needed = _discover(root_nodes, captures)

    buffers = {}
    for (node, nr), g in root_edges:
        if g is not None:
            _add_to_buffer(buffers, node, nr, g)
    ready = [(-n._sequence_nr, i, n) for i, n in enumerate(order)
             if n in buffers and deps.get(n, 0) == 0 and (needed is None or needed[n])]
    heapq.heapify(ready)
    captured = [None] * (len(inputs) if inputs is not None else 0)
    prev_mode, prev_valid = STATE.enabled, _ENGINE.checkpoint_valid
    STATE.enabled, _ENGINE.checkpoint_valid = create_graph, inputs is None or accumulate
    try:
        _execute(ready, buffers, deps, needed, len(order), captures, captured, accumulate,
                 keep_graph)
    finally:
        STATE.enabled, _ENGINE.checkpoint_valid = prev_mode, prev_valid
    if inputs is not None and not accumulate:
        for i, g in enumerate(captured):
            if g is None and not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have "
                                   "been used in the graph. Set allow_unused=True if this "
                                   "is the desired behavior.")
        return tuple(captured)
    return None


def _add_to_buffer(buffers, node, nr, g):
    buf = buffers.get(node)
    if buf is None:
        buf = buffers[node] = [None] * node._num_outputs
    buf[nr] = g if buf[nr] is None else buf[nr] + g


def _capture_points(inputs, accumulate):
    """{node: [(output_nr, input index, tensor)]} where gradients for `inputs` are read."""
    captures = {}
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs must be Tensors, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        node, nr = gradient_edge(t)
        captures.setdefault(node, []).append((nr, i, t))
    return captures


def _count_dependencies(root_nodes):
    """For a plain backward(): the number of edges into each node reachable from the
    roots, and the roots in the order _discover would rank them (later roots first).
    NB: a flat walk, cheaper than _discover's post-order (nothing here needs it)."""
    deps = {}
    roots = []
    for root in root_nodes:
        if root not in deps:
            deps[root] = 0
            roots.append(root)
    stack = list(roots)
    while stack:
        for child, _ in stack.pop()._edges:
            if child is None:
                continue
            if child in deps:
                deps[child] += 1
            else:
                deps[child] = 1
                stack.append(child)
    roots.reverse()
    return roots, deps


def _discover(root_nodes, captures):
    """Post-order of the nodes reachable from the roots, reversed (roots first); the
    number of edges into each node from nodes that will run; and which nodes must run
    (None: all of them, the plain backward() case)."""
    order, deps = [], {}
    count_now = captures is None  # else only edges between needed nodes count (below)
    for root in root_nodes:
        if root in deps:
            continue
        deps[root] = 0
        stack = [(root, iter(root._edges))]
        while stack:
            node, children = stack[-1]
            for child, _ in children:
                if child is None:
                    continue
                if child in deps:
                    if count_now:
                        deps[child] += 1
                    continue
                deps[child] = 1 if count_now else 0
                stack.append((child, iter(child._edges)))
                break
            else:
                stack.pop()
                order.append(node)
    needed = None
    if captures is not None:
        needed = {}
        for node in order:  # children come first, so their flag is already known
            needed[node] = node in captures or any(
                c is not None and needed[c] for c, _ in node._edges)
        for node in order:
            if needed[node]:
                for child, _ in node._edges:
                    if child is not None and needed[child]:
                        deps[child] += 1
    order.reverse()
    return order, deps, needed


def _execute(ready, buffers, deps, needed, tiebreak, captures, captured, accumulate,
             keep_graph):
    """Run ready nodes, highest sequence number first, passing gradients on. NB: the hot
    loop of backward. A node with no hooks, capture or anomaly check runs inline; a node
    that alone became ready while no other waits runs next with its gradients in hand,
    past the heap and the buffers (every step of a chain)."""
    anomaly = anomaly_mode.STATE.enabled
    pruned = needed is not None
    plain = not anomaly and captures is None  # no node needs the general evaluation
    release = not keep_graph
    node, grads = _pop_waiting(ready, buffers)
    while node is not None:
        if node._no_hooks and (plain or not anomaly and node not in captures):
            if grads is None:
                outs = (None,) * len(node._edges)
            else:
                outs = node._run(grads)
                if release and node._saved:
                    node._release()
        else:
            outs = _evaluate_slowly(node, grads, anomaly, captures, captured, accumulate,
                                    keep_graph)
        sender, node, grads = node, None, None
        for (child, nr), g in zip(sender._edges, outs):
            if child is None:
                if g is not None:
                    _check_tensor_input(sender, outs, g)
                continue
            if pruned and not needed[child]:
                continue
            if g is not None:
                shape, dtype = child._output_meta[nr]
                if type(g) is not Tensor or g._data.dtype is not dtype or \
                        g._data.shape != shape:  # NB: identity first: the cheap common case
                    g = _validated(sender, _position(sender, outs, child, nr, g), g, shape,
                                   dtype)
                if anomaly:
                    anomaly_mode.record_sender(child, sender)
            remaining = deps[child] - 1
            if remaining:  # more gradients to come
                deps[child] = remaining
                if g is not None:
                    _add_to_buffer(buffers, child, nr, g)
                continue
            got = buffers.pop(child, None)
            if g is not None:
                if got is None:
                    if child._num_outputs == 1:
                        got = [g]
                    else:
                        got = [None] * child._num_outputs
                        got[nr] = g
                else:
                    got[nr] = g if got[nr] is None else got[nr] + g
            if node is None and not ready:
                node, grads = child, got  # the only ready node: it runs next
                continue
            if node is not None:  # a second one: both wait in the heap
                tiebreak = _wait(ready, buffers, node, grads, tiebreak)
                node = None
            tiebreak = _wait(ready, buffers, child, got, tiebreak)
        if node is None:
            node, grads = _pop_waiting(ready, buffers)


def _pop_waiting(ready, buffers):
    """The waiting node with the highest sequence number and its gradients (None when
    none reached it: buffers are made by the first gradient that is not None)."""
    if not ready:
        return None, None
    node = heapq.heappop(ready)[2]
    return node, buffers.pop(node, None)


def _wait(ready, buffers, node, grads, tiebreak):
    """Put a ready node on the heap, its gradients in the buffers; the next tiebreak."""
    if grads is not None:
        buffers[node] = grads
    tiebreak += 1
    heapq.heappush(ready, (-node._sequence_nr, tiebreak, node))
    return tiebreak


def _evaluate_slowly(node, grads, anomaly, *args):
    """A node with hooks, a capture or anomaly checks: the general path."""
    if grads is None:
        grads = [None] * node._num_outputs
    if anomaly:
        return _evaluate_with_anomaly_checks(node, grads, *args)
    return _evaluate(node, grads, *args)


def _validated(node, i, g, shape, dtype):
    """Gradient i a node returned, checked against the output it flows into (PyTorch's
    validate_outputs): a broadcast gradient is summed back to the shape, the dtype cast."""
    if not isinstance(g, Tensor):
        raise RuntimeError(f"function {node.name()} returned a gradient of type "
                           f"{type(g).__name__} at index {i}: expected Variable or None")
    if g._data.shape != shape:
        if not _expandable_to(shape, g._data.shape):
            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index "
                               f"{i} - got {list(g._data.shape)} but expected shape "
                               f"compatible with {list(shape)}")
        g = g.sum_to_size(shape)
    if g._data.dtype != dtype:
        g = g.to(dtype)
    return g


def _expandable_to(shape, desired):
    if len(shape) > len(desired):
        return False
    return all(s == d or s == 1 for s, d in zip(reversed(shape), reversed(desired)))


def _position(node, outs, child, nr, g):
    """Which of the node's results g is, on its way to (child, nr) (for messages)."""
    return next(k for k, (e, o) in enumerate(zip(node._edges, outs))
                if e[0] is child and e[1] == nr and o is g)


def _check_tensor_input(node, outs, g):
    """A gradient for an argument that needs none is dropped, unless that argument was
    no tensor at all: PyTorch's error."""
    for k, (e, o) in enumerate(zip(node._edges, outs)):
        if o is g and e is NOT_TENSOR:
            raise _non_tensor_gradient(node, k)


def _non_tensor_gradient(node, i):
    return RuntimeError(f"function {node.name()} returned a gradient different than None at "
                        f"position {i + 1}, but the corresponding forward input was not a "
                        "Variable")


def _all_none(grads):
    # NB: not grads.count(None): that compares with ==, which is elementwise on tensors
    for g in grads:
        if g is not None:
            return False
    return True


def _evaluate(node, grads, captures, captured, accumulate, keep_graph):
    """Hooks, capture, then the node itself; returns one gradient per edge."""
    if node._tensor_pre_hooks is not None or node._retain_grad_hooks is not None:
        _run_tensor_hooks(node, grads)
    if captures is not None and node in captures:
        for nr, i, t in captures[node]:
            if accumulate:
                if not isinstance(node, AccumulateGrad):
                    accumulate_into(t, grads[nr])
            else:
                captured[i] = grads[nr]
        if not accumulate and isinstance(node, AccumulateGrad):
            return ()
    if _all_none(grads):
        return (None,) * len(node._edges)
    if node._pre_hooks:
        for hook in list(node._pre_hooks.values()):
            result = hook(tuple(grads))
            if result is not None:
                grads = list(result)
    outs = _validate_outputs(node, node._run(grads))
    if node._post_hooks:
        outs = _run_post_hooks(node, outs, grads)
    if not keep_graph:
        node._release()
    return outs


def _validate_outputs(node, outs):
    """Each gradient checked against what it flows into, as _execute checks it on the
    way; here first, so that post hooks and anomaly mode see the checked gradients."""
    checked = list(outs)
    for k, (edge, g) in enumerate(zip(node._edges, outs)):
        child, nr = edge
        if g is None:
            continue
        if child is None:
            if edge is NOT_TENSOR:
                raise _non_tensor_gradient(node, k)
            continue
        checked[k] = _validated(node, k, g, *child._output_meta[nr])
    return checked


def _tensor_outs(node, outs):
    """The gradients for the node's tensor inputs (next_functions), as PyTorch's hooks and
    messages count them."""
    return tuple(g for g, e in zip(outs, node._edges) if e is not NOT_TENSOR)


def _run_post_hooks(node, outs, grads):
    """Node hooks `hook(grad_inputs, grad_outputs)`; a returned tuple replaces grad_inputs."""
    grad_inputs = _tensor_outs(node, outs)
    for hook in list(node._post_hooks.values()):
        result = hook(grad_inputs, tuple(grads))
        if result is not None:
            grad_inputs = tuple(result)
    per_tensor = iter(grad_inputs)
    return [None if e is NOT_TENSOR else next(per_tensor, None) for e in node._edges]


def _evaluate_with_anomaly_checks(node, grads, *args):
    try:
        outs = _evaluate(node, grads, *args)
        anomaly_mode.check_node(node, _tensor_outs(node, outs), grads)
    except Exception:
        anomaly_mode.warn_backward_error(node)
        raise
    return outs


def _checked_hook_result(hook, result, grad):
    """What a tensor hook returned must be a tensor like the gradient (PyTorch's checks)."""
    name = getattr(hook, "__name__", repr(hook))
    if not isinstance(result, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    if result._data.shape != grad._data.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    if result._data.dtype != grad._data.dtype:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was "
                           f"{grad.dtype} got {result.dtype})")
    return result


def _run_tensor_hooks(node, grads):
    """Hooks registered on the tensors this node produced (or on the leaf), then
    retain_grad, which always runs last."""
    for nr in range(len(grads)):
        hooks = node._tensor_hooks(nr)
        if hooks and grads[nr] is not None:
            for hook in list(hooks.values()):
                result = hook(grads[nr])
                if result is not None:
                    grads[nr] = _checked_hook_result(hook, result, grads[nr])
    if node._retain_grad_hooks:
        for nr, ref in node._retain_grad_hooks.items():
            t = ref()
            g = grads[nr]
            if t is not None and g is not None:
                if t._grad is None:
                    t._grad = _make(np.array(g._data, copy=True)) if not STATE.enabled else g
                else:
                    t._grad = t._grad + g
