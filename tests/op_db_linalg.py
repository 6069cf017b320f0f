"""Op rows: linalg (matmul mm bmm dot mv outer einsum). Matmul covers numpy's cases:
1-D operands, batch broadcasting and empty dims; einsum covers explicit and implicit
outputs, diagonals, traces, permutations, sums inside one operand and '...'."""
import numpy as np

import adkit as ak

from .op_db import OpInfo, SampleInput, make_array


def _pairs(shapes):
    def samples(dtype, rng):
        return [SampleInput((make_array(a, dtype, rng), make_array(b, dtype, rng)),
                            name=f"{a}x{b}") for a, b in shapes]
    return samples


MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                 ((2, 2, 3), (3, 2)), ((3,), (2, 3, 2)), ((2, 1, 2, 3), (3, 3, 2)),
                 ((2, 3), (2, 3, 2)), ((2, 2, 3), (3,)), ((0, 3), (3, 2)), ((2, 0), (0, 3))]

EINSUM_CASES = [  # (equation, operand shapes)
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 2)]),
    ("i,i->", [(4,)] * 2), ("i,j->ij", [(3,), (4,)]), ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]), ("ii", [(4, 4)]), ("iij->ji", [(2, 2, 3)]),
    ("ij->i", [(3, 4)]), ("ij,k->ik", [(2, 3), (4,)]), ("ba", [(2, 3)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
    ("i...->...", [(2, 3, 2)]), ("...i,...i", [(2, 3), (2, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 3)]), ("ii,ij->j", [(3, 3), (3, 2)]),
    ("i,i,i->i", [(3,)] * 3), ("ij,ij->", [(0, 3), (0, 3)]),
]


def _einsum_samples(dtype, rng):
    out = [SampleInput((eq,) + tuple(make_array(s, dtype, rng) for s in shapes), name=eq)
           for eq, shapes in EINSUM_CASES]
    out.append(SampleInput(("ij,j->i", [make_array((2, 3), dtype, rng),
                                        make_array((3,), dtype, rng)]), name="list"))
    return out


def _einsum_ref(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], list):
        operands = operands[0]
    return np.einsum(equation, *operands)


ROWS = [
    OpInfo("matmul", np.matmul, _pairs(MATMUL_SHAPES), method="matmul"),
    OpInfo("matmul_operator", np.matmul, _pairs(MATMUL_SHAPES[:8]),
           op=lambda x, y: x @ y),
    OpInfo("mm", np.matmul, _pairs([((2, 3), (3, 4)), ((1, 3), (3, 1)), ((0, 2), (2, 3))]),
           method="mm"),
    OpInfo("bmm", np.matmul, _pairs([((2, 2, 3), (2, 3, 4)), ((1, 3, 2), (1, 2, 2))]),
           method="bmm"),
    OpInfo("dot", np.dot, _pairs([((4,), (4,)), ((1,), (1,))]), method="dot"),
    OpInfo("mv", np.matmul, _pairs([((2, 3), (3,)), ((4, 1), (1,))]), method="mv"),
    OpInfo("outer", np.outer, _pairs([((3,), (4,)), ((1,), (2,)), ((0,), (3,))]),
           method="outer"),
    OpInfo("einsum", _einsum_ref, _einsum_samples, op=ak.einsum),
]
