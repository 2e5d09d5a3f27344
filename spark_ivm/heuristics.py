"""Materialization policy: which deltas get auxiliary maps and how each map is maintained.

The compiler (mechanism) asks these questions; the answers live here so that a cost model can
replace them without touching the viewlet transform.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """depth: None = full higher-order IVM; 1 = classic first-order IVM (deltas read base tables);
    0 = re-evaluate the view's maps on every batch."""

    depth: int | None = None

    def __post_init__(self):
        if self.depth is not None and (not isinstance(self.depth, int) or self.depth < 0):
            raise ValueError(f"depth must be a non-negative integer or None, not {self.depth!r}")

    def maintenance(self, level: int) -> str:
        """How a map found at `level` (0 = the view's own maps) is kept up to date."""
        if self.depth == 0:
            return "recompute"
        if self.depth is not None and level + 1 >= self.depth:
            return "first-order"
        return "incremental"
