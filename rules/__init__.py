"""Rewrite rules over calculus expressions and the batches the compiler runs them in.

Each rule is one module with one pure function `Expr -> Expr`; the pipeline is data (`Batch`es),
not code paths. `extract_aggregates` is the one rule that needs a callback (to name new maps).
"""

from .cancel import cancel
from .contradictions import drop_contradictions
from .executor import Batch, FixedPoint, IdempotenceError, NonTerminationError, Once, RuleExecutor
from .extract import extract_aggregates
from .factorize import factorize
from .fold_constants import fold_constants
from .normalize import normalize
from .null_tests import split_null_tests
from .unify import unify

# Simplification of a delta (or of a definition) before maps are extracted from it.
SIMPLIFY = (
    Batch("polynomial normal form", FixedPoint(50),
          (normalize, split_null_tests, fold_constants, drop_contradictions, cancel)),
    Batch("variable elimination", FixedPoint(20), (unify,)),
    Batch("normal form after elimination", FixedPoint(50), (normalize, fold_constants, drop_contradictions, cancel)),
)

__all__ = [
    "SIMPLIFY", "Batch", "FixedPoint", "Once", "RuleExecutor", "NonTerminationError", "IdempotenceError",
    "cancel", "drop_contradictions", "extract_aggregates", "factorize", "fold_constants", "normalize",
    "split_null_tests", "unify",
]
