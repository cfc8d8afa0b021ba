"""What a benchmark prints about the code it measured: a checkout's commit, and whether its
tracked files differ from it (a figure from a changed tree is not the commit's figure).

The scripts in ``bench/`` run as ``python bench/NAME.py``, which puts this folder on
``sys.path``: they ``import provenance``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def commit(tree: Path) -> str:
    """The short commit of the checkout at ``tree`` (``"?"`` outside a git checkout)."""
    return _git(tree, "rev-parse", "--short", "HEAD") or "?"


def dirty(tree: Path) -> str:
    """``" (+ uncommitted changes)"`` when tracked files of ``tree`` differ from its commit, else ``""``."""
    return " (+ uncommitted changes)" if _git(tree, "status", "--porcelain", "--untracked-files=no") else ""


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=False)
    return done.stdout.strip()
