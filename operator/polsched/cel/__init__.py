"""CEL as polsched reads it before running it: a parser and a cost estimator.

The CEL library in use (`common-expression-language`, a Rust core) compiles and runs an
expression but shows neither its syntax tree nor a cost, and has no cost limit or
timeout. This package parses the expression itself (syntax: the CEL grammar, enough to
see every call, field and comprehension) and estimates what one evaluation costs
(cost: in the spirit of cel-go's checker/cost.go, which Kubernetes uses for its
per-expression static limit), so the Expression plugin can refuse an expression that is
too expensive when the policy loads, bound the inputs a pod or a node hands it, and
charge each evaluation to the pod's budget.

Purely data-manipulative: no I/O, no evaluation, no import of the CEL library.
"""

from polsched.cel.cost import (
    MAX_VIEW_VALUES,
    Bounds,
    Checks,
    CostModel,
    InputBoundError,
    Measured,
    Sizes,
    estimate,
    measure,
)
from polsched.cel.syntax import Expr, ParseError, parse

__all__ = [
    "MAX_VIEW_VALUES",
    "Bounds",
    "Checks",
    "CostModel",
    "Expr",
    "InputBoundError",
    "Measured",
    "ParseError",
    "Sizes",
    "estimate",
    "measure",
    "parse",
]
