"""adkit.control: loops and branches as higher-order ops (shared/API.md, "Control flow").

Owns: the public calls `scan`, `fori_loop`, `while_loop`, `cond`, `switch`. Each is one
IR node under tracing and vmap (its body a sub-Graph in the node's params) and a plain
Python loop or branch when run eagerly (autograd records it). Does not: hold logic here.
"""
from .accumulate import batch_accumulations
from .branch import Switch, SwitchPlan, cond, switch
from .hoist import hoist_invariants
from .loops import While, WhileGrad, WhilePlan, fori_loop, while_loop
from .merge import merge_residual_scans
from .scan import Scan, ScanPlan, scan

__all__ = ["batch_accumulations", "hoist_invariants", "merge_residual_scans", "scan", "fori_loop", "while_loop",
           "cond", "switch", "Scan", "ScanPlan", "Switch", "SwitchPlan", "While", "WhileGrad",
           "WhilePlan"]
