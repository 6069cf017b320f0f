"""Binary elementwise arithmetic with numpy broadcasting and PyTorch's type promotion.

Owns: add, sub, mul, div, pow, maximum, minimum, atan2. Each op is its forward (numpy)
and its partial derivatives (adkit ops); the family turns those into backward and jvp.
"""
import numpy as np

from ._families import BinaryElementwise
from ._helpers import cast_result, float_cast_result


class Add(BinaryElementwise):
    """z = x + y;  dz/dx = 1, dz/dy = 1."""
    public_name = "add"

    @staticmethod
    def forward(x, y):
        return cast_result(np.add(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return 1, 1


class Sub(BinaryElementwise):
    """z = x - y;  dz/dx = 1, dz/dy = -1."""
    public_name = "sub"
    aliases = ("subtract",)

    @staticmethod
    def forward(x, y):
        if isinstance(x, np.ndarray) and x.dtype == np.bool_ and (
                not isinstance(y, np.ndarray) or y.dtype == np.bool_):
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                               "supported. Use the `^` or `logical_xor()` operator instead.")
        return cast_result(np.subtract(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return 1, -1


class Mul(BinaryElementwise):
    """z = x * y;  dz/dx = y, dz/dy = x."""
    public_name = "mul"
    aliases = ("multiply",)

    @staticmethod
    def forward(x, y):
        return cast_result(np.multiply(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return y, x


class Div(BinaryElementwise):
    """z = x / y (true division);  dz/dx = 1/y, dz/dy = -z/y."""
    public_name = "div"
    aliases = ("divide", "true_divide")

    @staticmethod
    def forward(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return float_cast_result(np.true_divide(x, y), x, y)

    @staticmethod
    def partials(x, y, out):
        return 1 / y, -out / y
