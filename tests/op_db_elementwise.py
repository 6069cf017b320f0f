"""Op rows: unary and binary elementwise ops and comparisons."""
import numpy as np

from .op_db import OpInfo, binary_samples, unary_samples

ROWS = [
    OpInfo("neg", np.negative, unary_samples(), method="neg"),
    OpInfo("exp", np.exp, unary_samples(), method="exp"),
    OpInfo("add", np.add, binary_samples(), method="add"),
    OpInfo("sub", np.subtract, binary_samples(), method="sub"),
    OpInfo("mul", np.multiply, binary_samples(), method="mul"),
    OpInfo("div", np.true_divide, binary_samples(low_y=0.5, high_y=2.0), method="div"),
]
