"""Recognizes the IVM statements inside `spark.sql(...)` text; everything else passes through.

    CREATE INCREMENTAL VIEW [IF NOT EXISTS] name [WITH (depth = N, …)] AS query
    REFRESH INCREMENTAL VIEW name [FULL]
    REFRESH INCREMENTAL VIEWS
    DROP INCREMENTAL VIEW [IF EXISTS] name
    SHOW INCREMENTAL VIEWS
    EXPLAIN INCREMENTAL VIEW name
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from spark_ivm.errors import ParseError

_NAME = r"(?P<name>(?:`[^`]+`|[A-Za-z_][\w]*)(?:\.(?:`[^`]+`|[A-Za-z_][\w]*))?)"
_WS = r"\s+"

_CREATE_HEAD = re.compile(
    r"^\s*CREATE" + _WS + r"INCREMENTAL" + _WS + r"VIEW\b", re.I | re.S)
_CREATE = re.compile(
    r"^\s*CREATE\s+INCREMENTAL\s+VIEW\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?" + _NAME
    + r"\s*(?:WITH\s*\((?P<options>[^)]*)\)\s*)?AS\b(?P<query>.*)$", re.I | re.S)
_REFRESH_ALL = re.compile(r"^\s*REFRESH\s+INCREMENTAL\s+VIEWS\s*;?\s*$", re.I)
_REFRESH = re.compile(r"^\s*REFRESH\s+INCREMENTAL\s+VIEW\s+" + _NAME + r"(?P<full>\s+FULL)?\s*;?\s*$", re.I)
_DROP = re.compile(r"^\s*DROP\s+INCREMENTAL\s+VIEW\s+(?P<ie>IF\s+EXISTS\s+)?" + _NAME + r"\s*;?\s*$", re.I)
_SHOW = re.compile(r"^\s*SHOW\s+INCREMENTAL\s+VIEWS\s*;?\s*$", re.I)
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+INCREMENTAL\s+VIEW\s+" + _NAME + r"\s*;?\s*$", re.I)
_ANY_IVM = re.compile(r"^\s*(CREATE|REFRESH|DROP|SHOW|EXPLAIN)\s+INCREMENTAL\b", re.I)

KNOWN_OPTIONS = {"depth", "store"}


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
    full: bool = False


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


def unquote(name: str) -> str:
    return ".".join(part.strip("`") for part in re.findall(r"`[^`]+`|[^.]+", name))


def parse_statement(text: str):
    """The IVM statement in text, or None when text is ordinary Spark SQL."""
    if not _ANY_IVM.match(text):
        return None
    if m := _CREATE.match(text):
        query = m.group("query").strip().rstrip(";").strip()
        if not query:
            raise ParseError("CREATE INCREMENTAL VIEW needs a query after AS")
        head = re.sub(r"[^\n]", " ", text[:m.start("query")])
        positioned = head + text[m.start("query"):].rstrip().rstrip(";")
        return CreateView(unquote(m.group("name")), query, bool(m.group("ine")), _options(m.group("options")),
                          positioned)
    if _REFRESH_ALL.match(text):
        return RefreshAll()
    if m := _REFRESH.match(text):
        return RefreshView(unquote(m.group("name")), bool(m.group("full")))
    if m := _DROP.match(text):
        return DropView(unquote(m.group("name")), bool(m.group("ie")))
    if _SHOW.match(text):
        return ShowViews()
    if m := _EXPLAIN.match(text):
        return ExplainView(unquote(m.group("name")))
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
        if not value.isdigit():
            raise ParseError(f"depth must be a non-negative integer or 'unlimited', not {value!r}")
        return int(value)
    return value
