"""adkit.nn: only `functional` for now."""
from . import functional
