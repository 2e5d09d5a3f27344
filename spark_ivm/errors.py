"""Exceptions raised to users. Every message names the problem and, for SQL, where it is."""

from __future__ import annotations


class IVMError(Exception):
    """Base of every error spark_ivm raises on purpose."""


class ParseError(IVMError):
    """The SQL text is not syntactically valid."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"{message}{where}")
        self.line = line
        self.column = column


class UnsupportedQueryError(IVMError):
    """The query uses a construct that cannot (yet) be maintained incrementally."""

    def __init__(self, construct: str, line: int | None = None, column: int | None = None, detail: str = ""):
        where = f" at line {line}, column {column}" if line is not None else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported in an incremental view: {construct}{where}{extra}")
        self.construct = construct
        self.line = line
        self.column = column


class UnknownTableError(IVMError):
    pass


class UnknownColumnError(IVMError):
    pass


class NonDeterministicError(UnsupportedQueryError):
    """A non-deterministic function cannot be maintained: its delta is not 0."""


class InvalidQueryError(IVMError):
    """Spark itself rejects the view's query (a type error, an ambiguous name, …)."""


class ViewExistsError(IVMError):
    pass


class UnknownViewError(IVMError):
    pass


class RefreshError(IVMError):
    """A refresh cannot proceed (change feed gone, source schema changed, …)."""


class CatalogEntryError(IVMError):
    """A view's catalog entry cannot be read: written by another version of spark_ivm, or damaged.

    `store` is the view's map store table when it could be found without reading the entry, so that
    DROP INCREMENTAL VIEW removes the view's maps too."""

    def __init__(self, message: str, view: str, store: str | None = None):
        super().__init__(message)
        self.view = view
        self.store = store
