"""Sparsity rules of the loop and branch ops: the sparsity pass run through their bodies.

Owns: `scan_sparsity` (the body's sets carried step by step: exact per step, for loops
of up to MAX_STEP_NODES body nodes in all) and `switch_sparsity` (the union over the
branches, or the one branch a constant index picks). Each returns what an op's
`sparsity` rule returns (ops/_sparsity.py): per result, {argument position: (dst, src)}.
`while_sparsity`: its trip count is a value, so a final carry may hold what any number
of steps put there: the union over step counts, found as a fixed point. Does not:
propagate through graphs itself (ir/passes/sparsity.py).
"""
import numpy as np

from ..ir.passes.index_sets import Deps, stacked, union
from ..ir.passes.sparsity import as_links, body_deps, numbered

# steps x body nodes beyond which a scan's rule gives up (unknown: all-dependent)
# rather than spend seconds stepping through the body
MAX_STEP_NODES = 20_000


def _operand_deps(operands):
    sizes = [a.size for a in operands]
    live = [a.dtype.kind in "fc" for a in operands]
    return sizes, numbered(sizes, live)


def scan_sparsity(plan, operands):
    """Operands: (consts..., carries..., xs...) at argument positions 1, 2, ...; results:
    (final carries..., stacked ys..., stacked history...)."""
    if plan.length * max(len(plan.body), 1) > MAX_STEP_NODES:
        return None
    sizes, deps = _operand_deps(operands)
    nc, nk = plan.n_consts, plan.n_carry
    consts, carry, xs = deps[:nc], deps[nc:nc + nk], deps[nc + nk:]
    x_sizes = [s // max(plan.length, 1) for s in sizes[nc + nk:]]
    ys = [[None] * plan.length for _ in range(plan.n_ys)]
    history = [[None] * plan.length for _ in range(nk)]
    for i in plan.steps():
        slices = [x.gather(np.arange(i * m, (i + 1) * m, dtype=np.int64))
                  for x, m in zip(xs, x_sizes)]
        for h, c in zip(history, carry):
            h[i] = c
        outs = body_deps(plan.body, consts + carry + slices)
        carry = outs[:nk]
        for y, o in zip(ys, outs[nk:]):
            y[i] = o
    results = carry + [_stack(y, spec) for y, spec in zip(ys, plan.output_specs()[nk:])]
    if plan.history:
        results += [_stack(h, spec) for h, spec in
                    zip(history, plan.output_specs()[nk + plan.n_ys:])]
    positions = range(1, len(operands) + 1)
    return tuple(as_links(r, sizes, positions) for r in results)


def while_sparsity(plan, operands):
    """Operands: (cond consts..., body consts..., carries...) at argument positions 1,
    2, ...; results: the final carries. Each result reads what its carry holds after
    zero, one, two... steps. The body's rule is monotone (more sets in, more out), so
    reach = carry, then reach = reach | body(reach) until it stops growing; None
    (every result reads everything) when that takes more than MAX_STEP_NODES nodes."""
    sizes, deps = _operand_deps(operands)
    nq, nb = plan.n_cond_consts, plan.n_body_consts
    body_consts, reach = deps[nq:nq + nb], deps[nq + nb:]
    shapes = [spec.shape for spec in plan.carry_specs()]
    for _ in range(MAX_STEP_NODES // max(len(plan.body), 1)):
        stepped = body_deps(plan.body, body_consts + reach)
        grown = [union([r.with_shape(shape), s.with_shape(shape)], shape)
                 for r, s, shape in zip(reach, stepped, shapes)]
        # grown holds reach, so as many entries means the same sets
        if all(g.nnz == r.nnz for g, r in zip(grown, reach)):
            positions = range(1, len(operands) + 1)
            return tuple(as_links(r, sizes, positions) for r in reach)
        reach = grown
    return None


def _stack(per_step, spec):
    if not per_step:  # a scan of length 0
        return Deps.empty(int(np.prod(spec.shape, dtype=np.int64)))
    return stacked(per_step)


def switch_sparsity(plan, index, operands):
    """Operands at argument positions 2, 3, ... (the index, at 1, carries no
    derivative): each result reads what it reads in any branch the index may pick."""
    branches = plan.branches
    if index.value is not None:
        branches = [branches[int(np.clip(int(index.value), 0, len(branches) - 1))]]
    sizes, deps = _operand_deps(operands)
    per_branch = [body_deps(branch, deps) for branch in branches]
    positions = range(2, len(operands) + 2)
    results = []
    for outs in zip(*per_branch):
        links = [as_links(d, sizes, positions) for d in outs]
        results.append({pos: (np.concatenate([l[pos][0] for l in links]),
                              np.concatenate([l[pos][1] for l in links]))
                        for pos in positions})
    return tuple(results)
