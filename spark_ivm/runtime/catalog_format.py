"""A view's catalog entry and the JSON the catalog table stores it as.

The entry is plain data only: names, SQL, numbers and the plan's calculus as text (plan_json). Whoever
can write the catalog table can change what a view computes, but reading an entry never runs code, and
renaming a Python class does not break stored views. Format 1:

    {"format": 1, "name": "db.v", "store": "db.v__ivm_maps", "sql": "SELECT …", "options": {"depth": 1},
     "database": "db", "created_at": 1764150000.5, "token": 123, "sources": {"R": "db.r"},
     "source_columns": {"db.r": [["a", "int"], …]}, "source_ids": {"db.r": "…"},
     "not_null_columns": {"db.r": ["a", …]},
     "output_types": [["a", "int"], …],
     "layout": {"maps": [{"map_id": 0, "name": "q_count", "keys": ["a"], "value_type": "bigint"}, …],
                "key_types": [["a", "int"]], "key_names": [["a", "k_a"]], "progress_id": -1},
     "plan": {…}}                                                          (see plan_json)

The layout is the StoreLayout without its table, which is `store`. Format 2 is format 1 in which maps may
share a map_id, that is, store rows (see mapstore), each map that does with its `value_column` where that
is not v_<type>. An entry whose maps share none is written in format 1, which versions before format 2
read too.

`format` says how to read the rest. `name` and `store` keep their meaning in every format, so that any
version can drop a view whose entry it cannot read. An entry of another format, or a pickled entry of a
version before format 1, raises CatalogEntryError saying how to recover (drop the view, create it again).
"""

from __future__ import annotations

import base64
import binascii
import json
import pickletools
from dataclasses import dataclass, field

from spark_ivm.compiler.plan import Plan
from spark_ivm.compiler.plan_json import Fields, FormatError, plan_from_data, plan_to_data
from spark_ivm.errors import CatalogEntryError
from spark_ivm.runtime.mapstore import StoredMap, StoreLayout

__all__ = ["FORMAT", "ViewEntry", "entry_to_json", "entry_from_json", "layout_to_json", "layout_from_json"]

FORMAT = 2  # the newest format, written where a view's maps share rows; FORMATS are read
FORMATS = (1, 2)


@dataclass
class ViewEntry:
    name: str  # qualified db.view
    sql: str
    options: dict
    plan: Plan
    layout: StoreLayout
    sources: dict[str, str]  # relation name in the plan -> qualified table
    source_columns: dict[str, list[list[str]]]  # qualified table -> [[column, type], …]
    output_types: list[list[str]]  # [[column, type], …] of the defining query
    created_at: float
    database: str = ""  # the current database at CREATE: unqualified names in `sql` resolve there
    # Written with the view's progress in its store at CREATE; a cached entry whose token the store no
    # longer holds is stale (the view was dropped, re-created or rebuilt by another process).
    token: int = 0
    # Each source's Delta table id when the view was built: a table dropped and created again under the
    # same name has another, and its change data feed does not continue the old one's.
    source_ids: dict[str, str] = field(default_factory=dict)
    # The columns of each source declared NOT NULL when the view was built, whose counts of non-NULL values
    # the plan takes as the row count (absent in entries written before: none).
    not_null_columns: dict[str, list[str]] = field(default_factory=dict)

    @property
    def store(self) -> str:
        return self.layout.table


# -- writing ------------------------------------------------------------------------------------------

def entry_to_json(entry: ViewEntry) -> str:
    layout = layout_to_data(entry.layout)
    store = layout.pop("table")  # once, at the top, where every format keeps it
    data = {
        "format": FORMAT if entry.layout.shares_any_rows else 1,
        "name": entry.name,
        "store": store,
        "sql": entry.sql,
        "options": entry.options,
        "database": entry.database,
        "created_at": entry.created_at,
        "token": entry.token,
        "sources": entry.sources,
        "source_columns": entry.source_columns,
        "source_ids": entry.source_ids,
        "not_null_columns": entry.not_null_columns,
        "output_types": entry.output_types,
        "layout": layout,
        "plan": plan_to_data(entry.plan),
    }
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def layout_to_data(layout: StoreLayout) -> dict:
    return {
        "table": layout.table,
        "maps": [{"map_id": m.map_id, "name": m.name, "keys": list(m.keys), "value_type": m.value_type,
                  **({"value_column": m.column} if m.column else {})}
                 for m in layout.maps],
        "key_types": [list(pair) for pair in layout.key_types],
        "key_names": [list(pair) for pair in layout.key_names],
        "progress_id": layout.progress_id,
    }


def layout_to_json(layout: StoreLayout) -> str:
    return json.dumps(layout_to_data(layout), ensure_ascii=False, separators=(",", ":"))


# -- reading ------------------------------------------------------------------------------------------

def entry_from_json(text: str, view: str, catalog: str | None = None) -> ViewEntry:
    """The entry stored as `text` for the view named `view`; CatalogEntryError if it cannot be read
    (`catalog`: the catalog table, named in the error so that the user finds the view's query)."""
    data = _entry_data(text, view, catalog)
    try:
        return _entry(data)
    except FormatError as exc:
        raise _unreadable(view, f"its catalog entry is damaged ({exc})", catalog, _store_field(data)) from None


def layout_from_json(text: str) -> StoreLayout:
    return layout_from_data(json.loads(text))


def layout_from_data(data: object, path: str = "", table: str | None = None) -> StoreLayout:
    d = Fields(data, path)
    return StoreLayout(
        table=d.string("table") if table is None else table,
        maps=d.objects("maps", _stored_map),
        key_types=_pairs(d, "key_types"),
        key_names=_pairs(d, "key_names"),
        progress_id=d.integer("progress_id"),
    )


def _entry_data(text: str, view: str, catalog: str | None) -> dict:
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        data = None
    if data is None or not isinstance(data, dict):
        if _pickled(text):
            problem = ("its catalog entry was written by an older version of spark_ivm as a pickled Python "
                       "object, which this version does not read (reading one can run any code)")
            raise _unreadable(view, problem, catalog, _pickled_store(text))
        raise _unreadable(view, "its catalog entry is damaged (not a JSON object)", catalog)
    found = data.get("format")
    if type(found) is not int or found not in FORMATS:  # JSON's true (a Python bool, == 1) is no format number
        problem = (f"its catalog entry has format {json.dumps(found)}, which this version of spark_ivm does "
                   f"not read (it reads formats {', '.join(map(str, FORMATS))}; the version that wrote the "
                   f"entry reads it)")
        raise _unreadable(view, problem, catalog, _store_field(data))
    return data


def _entry(data: dict) -> ViewEntry:
    d = Fields(data, "")
    created_at = d.typed("created_at", (int, float), "a number")
    return ViewEntry(
        name=d.string("name"),
        sql=d.string("sql"),
        options=_options(d),
        plan=plan_from_data(d.get("plan"), "plan"),
        layout=layout_from_data(d.get("layout"), "layout", table=d.string("store")),
        sources=_string_map(d, "sources"),
        source_columns={table: _pair_list(columns, f"source_columns.{table}")
                        for table, columns in d.typed("source_columns", (dict,), "an object").items()},
        output_types=_pair_list(d.array("output_types"), "output_types"),
        created_at=float(created_at),
        database=d.string("database"),
        token=d.integer("token"),
        source_ids=_string_map(d, "source_ids"),
        not_null_columns=_string_lists(d, "not_null_columns"),
    )


def _stored_map(data: object, path: str) -> StoredMap:
    d = Fields(data, path)
    return StoredMap(d.integer("map_id"), d.string("name"), d.strings("keys"), d.string("value_type"),
                     d.string("value_column") if "value_column" in d.data else None)


def _pairs(d: Fields, key: str) -> tuple[tuple[str, str], ...]:
    return tuple(tuple(pair) for pair in _pair_list(d.array(key), d.path(key)))


def _pair_list(pairs: object, path: str) -> list[list[str]]:
    """A list of [name, type] (or [variable, column]) pairs of strings."""
    if not isinstance(pairs, list):
        raise FormatError(path, "expected a list")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise FormatError(f"{path}[{i}]", "expected a pair of strings")
    return [list(pair) for pair in pairs]


def _string_lists(d: Fields, key: str) -> dict[str, list[str]]:
    """An optional object of lists of strings (absent: empty)."""
    found = d.typed(key, (dict,), "an object") if key in d.data else {}
    for k, v in found.items():
        if not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
            raise FormatError(f"{d.path(key)}.{k}", "expected a list of strings")
    return {k: list(v) for k, v in found.items()}


def _string_map(d: Fields, key: str) -> dict[str, str]:
    found = d.typed(key, (dict,), "an object")
    for k, v in found.items():
        if not isinstance(v, str):
            raise FormatError(f"{d.path(key)}.{k}", "expected a string")
    return dict(found)


def _options(d: Fields) -> dict:
    found = d.typed("options", (dict,), "an object")
    for k, v in found.items():
        if not (v is None or isinstance(v, (str, int, float, bool))):
            raise FormatError(f"options.{k}", "expected a string, a number, true, false or null")
    return dict(found)


def _store_field(data: object) -> str | None:
    store = data.get("store") if isinstance(data, dict) else None
    return store if isinstance(store, str) else None


def _unreadable(view: str, problem: str, catalog: str | None, store: str | None = None
                ) -> CatalogEntryError:
    query = f" (SELECT sql FROM {catalog} WHERE name = '{view}' returns the query)" if catalog else ""
    return CatalogEntryError(
        f"incremental view {view} cannot be used: {problem}. To recover, drop it and create it again: "
        f"DROP INCREMENTAL VIEW {view}, then CREATE INCREMENTAL VIEW {view} [WITH (…)] AS <its query>{query}",
        view, store)


# -- entries of versions before format 1 --------------------------------------------------------------
# They were base64 of a pickled ViewEntry. They are never unpickled: that would run whatever code the
# blob names. pickletools.genops only decodes the opcode stream and builds no object, which is enough to
# find the one string DROP needs, the store table.

_STRING_OPS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE")
_MEMO_PUTS = ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT")
_MEMO_GETS = ("GET", "BINGET", "LONG_BINGET")


def _pickle_bytes(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except (TypeError, ValueError, binascii.Error):
        return None
    return raw if raw[:1] == b"\x80" else None  # the PROTO opcode every pickle since Python 2.3 starts with


def _pickled(text: str) -> bool:
    return isinstance(text, str) and _pickle_bytes(text) is not None


def _pickled_store(text: str) -> str | None:
    """The `table` of the StoreLayout pickled in an old entry: its fields were pickled as a dict whose
    items are "table", <store>, "maps", … in a row (strings pickled once are referenced by memo after)."""
    raw = _pickle_bytes(text) if isinstance(text, str) else None
    if raw is None:
        return None
    memo: dict[int, str | None] = {}
    pushed: list[str | None] = []  # per opcode that pushes a value: the string it pushes, or None
    try:
        for op, arg, _ in pickletools.genops(raw):
            if op.name in _MEMO_PUTS:
                memo[len(memo) if op.name == "MEMOIZE" else arg] = pushed[-1] if pushed else None
            elif op.name in _MEMO_GETS:
                pushed.append(memo.get(arg))
            elif op.name not in ("PROTO", "FRAME"):
                pushed.append(arg if op.name in _STRING_OPS else None)
    except Exception:  # a damaged blob: the store stays unknown
        return None
    for i in range(len(pushed) - 2):
        if pushed[i] == "table" and isinstance(pushed[i + 1], str) and pushed[i + 2] == "maps":
            return pushed[i + 1]
    return None
