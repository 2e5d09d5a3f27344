"""The README stays a short guide for users: its length, its settings table against
`spark_ivm.config.SETTINGS`, and its links into docs/ (pure Python, no Spark)."""

from __future__ import annotations

import re
from pathlib import Path

from spark_ivm import config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 220

# [text](target) and ![alt](target); the target ends at whitespace or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _section(heading: str) -> str:
    """The README's text under `## heading`, up to the next heading of level 1 or 2."""
    lines = _text().splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"#{1,2} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_readme_is_short():
    lines = _text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move details into docs/"


def test_settings_table_lists_every_setting_with_its_default():
    rows = [_cells(line) for line in _section("Settings").splitlines() if line.lstrip().startswith("|")]
    header, rule, *body = rows
    assert [h.lower() for h in header[:2]] == ["key", "default"], header
    assert all(set(c) <= set("-: ") for c in rule), rule
    listed = {}
    for cells in body:
        key, default = (c.strip("`") for c in cells[:2])
        assert key not in listed, f"{key} is listed twice"
        listed[key] = default
    expected = {s.key: str(s.default) for s in config.SETTINGS}
    assert listed == expected


def test_links_into_docs_point_to_existing_files():
    targets = _LINK.findall(_text())
    relative = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]
    into_docs = [t for t in relative if t.split("#", 1)[0].lstrip("./").startswith("docs/")]
    assert into_docs, "the README links to no file in docs/"
    missing = [t for t in into_docs if not (ROOT / t.split("#", 1)[0]).is_file()]
    assert not missing, f"links to files that do not exist: {missing}"
    other_missing = [t for t in relative if t not in into_docs and not (ROOT / t.split("#", 1)[0]).exists()]
    assert not other_missing, f"links to paths that do not exist: {other_missing}"
