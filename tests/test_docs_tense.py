"""The documents and docstrings speak of the project, never of the periods it was written in.

A figure has one home and one tense: the docs state what the project does and measures now (git
keeps what it measured before). Numbered work periods ("session 14") and references to the
tracker's issue numbers ("issue #20", "(#20)") belong in commit messages, not in the files a
user reads. Scanned: every Markdown, Python, TOML, YAML and shell file and Dockerfile that git
tracks.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".md", ".py", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".txt"}
PATTERNS = [
    re.compile(r"(?<![-\w])sessions? \d+\b", re.IGNORECASE),  # "session 14", not "--max-sessions 64"
    re.compile(r"\bissues? #\d+", re.IGNORECASE),          # "issue #20"
    re.compile(r"\(#\d{1,3}(?:[,;][^)]*)?\)"),             # "(#20)", "(#20, item 4)"
    re.compile(r"\bwork periods? \d+\b", re.IGNORECASE),
]
THIS = Path(__file__).resolve()


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (the check reads the files git tracks)")
    files = [ROOT / line for line in out.splitlines()]
    return [p for p in files if p.exists() and p.resolve() != THIS
            and (p.suffix in SUFFIXES or p.name.startswith("Dockerfile") or p.name == "run")]


def _hits(text: str) -> list[str]:
    return [m.group(0) for pattern in PATTERNS for m in pattern.finditer(text)]


def test_the_patterns_catch_a_diary() -> None:
    assert _hits("measured in session 14 (#20); see issue #7") == ["session 14", "issue #7", "(#20)"]
    assert _hits("--max-sessions 64 and 8 sessions at once; colour #ff0000; anchor [x](#usage)") == []


def test_no_document_or_docstring_names_a_work_period_or_an_issue_number() -> None:
    offenders = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for hit in _hits(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {hit!r}")
    assert not offenders, "documents should speak of the project:\n" + "\n".join(offenders[:50])
