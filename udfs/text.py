"""Text functions."""

from __future__ import annotations

from spark_ivm.udfs.registry import udf

# Combining marks (accents) left as separate code points by NFKD decomposition.
_COMBINING_MARKS = r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"


@udf("string")
def normalize_text(s):
    """A key for matching names and labels: compatibility forms unified (NFKC), accents removed,
    case folded, runs of whitespace made one space, no leading or trailing space.

    'Ｃafé  Crème ' → 'cafe creme'."""
    text = s.astype(str).str.normalize("NFKD").str.replace(_COMBINING_MARKS, "", regex=True)
    text = text.str.casefold().str.normalize("NFKC")
    return text.str.replace(r"\s+", " ", regex=True).str.strip()
