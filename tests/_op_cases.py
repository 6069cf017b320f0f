"""Parametrization of the op table: one pytest case per (op, dtype, sample)."""
import numpy as np
import pytest

from .op_db import OP_DB


def op_cases(dtypes=None, only=None):
    """pytest params with ids like `exp-float64-sample2`."""
    cases = []
    for info in OP_DB:
        if only is not None and not only(info):
            continue
        for dtype in info.dtypes:
            if dtypes is not None and np.dtype(dtype) not in [np.dtype(d) for d in dtypes]:
                continue
            for i, sample in enumerate(info.samples(dtype)):
                cases.append(pytest.param(info, np.dtype(dtype), sample,
                                          id=f"{info.name}-{np.dtype(dtype).name}-sample{i}"))
    return cases


def flatten_outputs(out):
    """Tensor or (nested) tuple/list of tensors -> flat list."""
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flatten_outputs(o)]
    return [out]
