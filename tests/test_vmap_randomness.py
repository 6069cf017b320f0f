"""vmap's randomness modes, as torch.func.vmap: 'error' refuses a random op, 'same' draws
one value shared by every example, 'different' one per example (nested vmaps too)."""
import numpy as np
import pytest

import adkit as ak

ERROR = "vmap: called random operation while in randomness error mode"


@pytest.mark.parametrize("draw", [lambda: ak.randn(3), lambda: ak.rand(3),
                                  lambda: ak.randint(0, 5, (3,)).to(ak.float32)])
def test_error_mode_refuses_random_ops(draw):
    with pytest.raises(RuntimeError, match=ERROR):
        ak.func.vmap(lambda v: v + draw())(ak.zeros(2, 3))
    with pytest.raises(RuntimeError, match=ERROR):
        ak.vmap(lambda v: v + draw())(ak.zeros(2, 3))  # the default mode is 'error'


def test_same_mode_shares_one_draw_and_different_draws_per_example():
    xs = ak.zeros(4, 3)
    same = ak.func.vmap(lambda v: v + ak.randn(3), randomness="same")(xs).numpy()
    assert np.all(same == same[0])
    different = ak.func.vmap(lambda v: v + ak.randn(3), randomness="different")(xs).numpy()
    assert len({tuple(row) for row in different}) == 4


def test_draws_follow_manual_seed():
    ak.manual_seed(3)
    first = ak.func.vmap(lambda v: v + ak.rand(2), randomness="different")(ak.zeros(3, 2))
    ak.manual_seed(3)
    again = ak.func.vmap(lambda v: v + ak.rand(2), randomness="different")(ak.zeros(3, 2))
    assert first.tolist() == again.tolist()


def test_nested_vmaps_apply_each_levels_mode():
    xs = ak.zeros(2, 3, 4)
    inner_same = ak.func.vmap(ak.func.vmap(lambda v: v + ak.randn(4), randomness="same"),
                              randomness="different")(xs).numpy()
    assert np.all(inner_same[:, 0] == inner_same[:, 1])  # shared within an outer example
    assert not np.all(inner_same[0] == inner_same[1])  # different across outer examples
    with pytest.raises(RuntimeError, match=ERROR):
        ak.func.vmap(ak.func.vmap(lambda v: v + ak.randn(4), randomness="different"))(xs)


def test_random_tensors_outside_vmap_are_unchanged():
    x = ak.randn(2, 3, dtype=ak.float64, requires_grad=True)
    assert x.is_leaf and x.requires_grad and x.dtype == ak.float64
    assert ak.randint(7, size=(5,)).dtype == ak.int64
