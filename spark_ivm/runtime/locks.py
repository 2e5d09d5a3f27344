"""Statements on one view or map store in threads of one session: refreshes run side by side, while
CREATE, DROP and REFRESH … FULL of a view run alone.

Two refreshes of a store may run at once: Delta lets only one of two commits computed from one store
version land, and the other starts again (refresh.StoreRefresh). A DROP or a rebuild removes the store and
the view's definition instead: a refresh caught half way by it would commit into a store that is gone,
or write the definition of a view that is gone, back. So those wait for the refreshes of the view and of
its store to end, and a refresh that starts after them finds the view as they left it.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter


class StatementLocks:
    """Shared and exclusive holds on names (views and map stores), all of a statement's names at once."""

    def __init__(self):
        self._changed = threading.Condition()
        self._shared: Counter[str] = Counter()  # name -> holds by refreshes
        self._exclusive: dict[str, tuple[int, int]] = {}  # name -> (thread holding it, depth)

    def _free(self, name: str, exclusive: bool, me: int) -> bool:
        owner = self._exclusive.get(name, (me, 0))[0]
        if owner != me:
            return False
        return not exclusive or self._shared[name] == 0 or name in self._exclusive

    @contextlib.contextmanager
    def hold(self, names, exclusive: bool = False):
        """Hold the names (shared or exclusive) while the block runs. A thread that holds a name
        exclusively may take it again (a rebuild's own steps)."""
        me, names = threading.get_ident(), sorted(set(names))
        with self._changed:
            self._changed.wait_for(lambda: all(self._free(n, exclusive, me) for n in names))
            for n in names:
                if exclusive or n in self._exclusive:
                    self._exclusive[n] = (me, self._exclusive.get(n, (me, 0))[1] + 1)
                else:
                    self._shared[n] += 1
        try:
            yield
        finally:
            with self._changed:
                for n in names:
                    owner, depth = self._exclusive.get(n, (None, 0))
                    if owner == me:
                        if depth > 1:
                            self._exclusive[n] = (me, depth - 1)
                        else:
                            del self._exclusive[n]
                    else:
                        self._shared[n] -= 1
                        if not self._shared[n]:
                            del self._shared[n]
                self._changed.notify_all()
