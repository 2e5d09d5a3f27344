"""Recognizes the IVM statements inside `spark.sql(...)` text; everything else passes through.

    CREATE INCREMENTAL VIEW [IF NOT EXISTS] name [WITH (depth = N, store = 'name', refresh = 'auto', …)] AS query
    REFRESH INCREMENTAL VIEW name [INCREMENTAL | FULL]
    REFRESH INCREMENTAL VIEWS
    DROP INCREMENTAL VIEW [IF EXISTS] name
    SHOW INCREMENTAL VIEWS
    EXPLAIN INCREMENTAL VIEW name

Comments may come before a statement and after it. A name, of a view or of a map store (`store = 'name'`),
is letters, digits and underscores, with an optional database (db.name), each part in backticks or not:
the runtime writes it into the SQL it runs as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from spark_ivm.errors import ParseError

_NAME = r"(?P<name>(?:`[^`]+`|[A-Za-z_][\w]*)(?:\.(?:`[^`]+`|[A-Za-z_][\w]*))?)"
_WS = r"\s+"
# Whitespace and comments, before a statement or after it.
_COMMENTS = r"(?:\s|--[^\n]*|/\*.*?\*/)*"
_LEADING_COMMENTS = re.compile(_COMMENTS, re.S)
# One ";" between comments: two runs of spaces side by side would be split every way on a mismatch.
_END = _COMMENTS + r"(?:;" + _COMMENTS + r")?$"
# The names the runtime writes into the SQL it runs (views, map stores), one part or two (database.name):
# letters, digits and underscores, each part in backticks or not, so that no name can change what a
# statement does.
_PLAIN_PART = r"(?:`[A-Za-z_][A-Za-z0-9_]*`|[A-Za-z_][A-Za-z0-9_]*)"
_PLAIN_NAME = re.compile(_PLAIN_PART + r"(?:\." + _PLAIN_PART + r")?")

_CREATE_HEAD = re.compile(
    r"^\s*CREATE" + _WS + r"INCREMENTAL" + _WS + r"VIEW\b", re.I | re.S)
_CREATE = re.compile(
    r"^\s*CREATE\s+INCREMENTAL\s+VIEW\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?" + _NAME
    + r"\s*(?:WITH\s*\((?P<options>[^)]*)\)\s*)?AS\b(?P<query>.*)$", re.I | re.S)
_REFRESH_ALL = re.compile(r"^\s*REFRESH\s+INCREMENTAL\s+VIEWS" + _END, re.I | re.S)
_REFRESH = re.compile(r"^\s*REFRESH\s+INCREMENTAL\s+VIEW\s+" + _NAME + r"(?:\s+(?P<mode>FULL|INCREMENTAL))?" + _END,
                      re.I | re.S)
_DROP = re.compile(r"^\s*DROP\s+INCREMENTAL\s+VIEW\s+(?P<ie>IF\s+EXISTS\s+)?" + _NAME + _END, re.I | re.S)
_SHOW = re.compile(r"^\s*SHOW\s+INCREMENTAL\s+VIEWS" + _END, re.I | re.S)
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+INCREMENTAL\s+VIEW\s+" + _NAME + _END, re.I | re.S)
_ANY_IVM = re.compile(r"^\s*(CREATE|REFRESH|DROP|SHOW|EXPLAIN)\s+INCREMENTAL\b", re.I)

KNOWN_OPTIONS = {"depth", "store", "refresh"}
# How REFRESH brings a view up to date (the `refresh` option; see heuristics.refresh_fully): incremental,
# from the sources' changes; full, by recomputing its maps; auto, whichever the batches make cheaper.
REFRESH_POLICIES = ("auto", "incremental", "full")


@dataclass(frozen=True)
class CreateView:
    name: str
    query: str
    if_not_exists: bool = False
    options: dict = field(default_factory=dict)
    # The statement with everything before the query blanked out (line breaks kept): parsing it
    # gives error positions that count in the text the user passed to spark.sql.
    positioned_query: str = ""


@dataclass(frozen=True)
class RefreshView:
    name: str
    mode: str | None = None  # "full" or "incremental" for this refresh; None: as the view's refresh policy says


@dataclass(frozen=True)
class RefreshAll:
    pass


@dataclass(frozen=True)
class DropView:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class ShowViews:
    pass


@dataclass(frozen=True)
class ExplainView:
    name: str


def plain_name(name: str, what: str = "an incremental view") -> str:
    """The name, backticks removed, when it is one the runtime can write into SQL as it is."""
    if not _PLAIN_NAME.fullmatch(name):
        raise ParseError(f"the name of {what} is letters, digits and underscores, with an optional database "
                         f"(db.name), not {name[:80]!r}")
    return name.replace("`", "")


def _blank_leading_comments(text: str) -> str:
    """The text with the comments before its first statement blanked out (line breaks kept), so that
    `-- note` or `/* … */` before an IVM statement does not hide it and positions stay the same."""
    end = _LEADING_COMMENTS.match(text).end()
    return re.sub(r"[^\n]", " ", text[:end]) + text[end:]


def parse_statement(text: str):
    """The IVM statement in text, or None when text is ordinary Spark SQL."""
    text = _blank_leading_comments(text)
    if not _ANY_IVM.match(text):
        return None
    if m := _CREATE.match(text):
        query = m.group("query").strip().rstrip(";").strip()
        if not query:
            raise ParseError("CREATE INCREMENTAL VIEW needs a query after AS")
        head = re.sub(r"[^\n]", " ", text[:m.start("query")])
        positioned = head + text[m.start("query"):].rstrip().rstrip(";")
        return CreateView(plain_name(m.group("name")), query, bool(m.group("ine")), _options(m.group("options")),
                          positioned)
    if _REFRESH_ALL.match(text):
        return RefreshAll()
    if m := _REFRESH.match(text):
        return RefreshView(plain_name(m.group("name")), m.group("mode").lower() if m.group("mode") else None)
    if m := _DROP.match(text):
        return DropView(plain_name(m.group("name")), bool(m.group("ie")))
    if _SHOW.match(text):
        return ShowViews()
    if m := _EXPLAIN.match(text):
        return ExplainView(plain_name(m.group("name")))
    if _CREATE_HEAD.match(text):
        raise ParseError("expected CREATE INCREMENTAL VIEW [IF NOT EXISTS] name [WITH (option = value, …)] AS query",
                         1, 1)
    raise ParseError(f"malformed incremental view statement: {text.strip()[:80]!r}", 1, 1)


def _options(text: str | None) -> dict:
    if not text or not text.strip():
        return {}
    options = {}
    for item in text.split(","):
        if "=" not in item:
            raise ParseError(f"view option {item.strip()!r} must be written name = value")
        key, value = (s.strip() for s in item.split("=", 1))
        key = key.lower().strip("`'\"")
        if key not in KNOWN_OPTIONS:
            raise ParseError(f"unknown view option {key!r} (known: {', '.join(sorted(KNOWN_OPTIONS))})")
        options[key] = _option_value(key, value.strip("'\""))
    return options


def _option_value(key: str, value: str):
    if key == "depth":
        if value.lower() in ("unlimited", "none", "max"):
            return None
        if not re.fullmatch(r"[0-9]{1,9}", value):  # str.isdigit() holds for '²' too, which int() refuses
            raise ParseError(f"depth must be a non-negative integer or 'unlimited', not {value[:80]!r}")
        return int(value)
    if key == "store":
        return plain_name(value, "a map store")
    if key == "refresh":
        if value.lower() not in REFRESH_POLICIES:
            raise ParseError(f"refresh must be {', '.join(REFRESH_POLICIES[:-1])} or {REFRESH_POLICIES[-1]}, "
                             f"not {value[:80]!r}")
        return value.lower()
    return value
