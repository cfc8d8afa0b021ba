"""Write a server image's ``requirements.txt``: its dependencies, pinned (the recipe of every image).

pip resolves the project with the image's extras (``pip install --dry-run --ignore-installed
--report``, so nothing is installed and the installed packages do not matter), and the lock
keeps what the server needs of that resolution: those extras and the core dependencies the
server imports, with everything they require, each at the exact version pip chose.  The core
dependencies no server imports (:data:`NOT_IN_IMAGE`: the plotting stack, scipy, the trainer's
config libraries) stay out, and so does everything only they pull in (pillow, fonttools,
contourpy, kiwisolver, ...), unless an extra needs them too.

Each image has a small entry point beside its Dockerfile that names itself here
(:data:`IMAGES`).  Run it with the image's Python (3.11) on Linux, from anywhere, whenever
``pyproject.toml``'s ``dependencies`` or the image's extras change
(``tests/test_webshop_server.py`` checks that the WebShop lock still satisfies them)::

    python docker/webshop/lock.py            # rewrite docker/webshop/requirements.txt
    python docker/alfworld/lock.py --check   # exit 1 if docker/alfworld/requirements.txt would change
    python docker/lock.py alfworld --check   # the same
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
#: Core dependencies that no server imports (tests/test_webshop_production.py checks it for WebShop's).
NOT_IN_IMAGE = frozenset({"matplotlib", "scipy", "tyro", "pyyaml", "threadpoolctl", "backports-tarfile"})


@dataclass(frozen=True)
class Image:
    """One server image's lock: its extras and the header lines its lock file carries.

    Attributes:
        name: The image's folder under ``docker/`` (its lock: ``docker/<name>/requirements.txt``).
        extras: The project's extras the server needs.
        how: The header's first lines: what the image's Dockerfile does with the lock.
        what: The header's lines after the command: what was resolved and kept (``{date}``,
            ``{target}`` and ``{left_out}`` are filled in).
    """

    name: str
    extras: tuple[str, ...]
    how: tuple[str, ...]
    what: tuple[str, ...]

    @property
    def lock(self) -> Path:
        return REPO / "docker" / self.name / "requirements.txt"

    @property
    def command(self) -> str:
        return f"python docker/{self.name}/lock.py"

    @property
    def target(self) -> str:
        return f".[{','.join(self.extras)}]"


IMAGES = {
    "webshop": Image(
        "webshop", ("webshop",),
        how=("# The WebShop server image's dependencies, pinned: docker/webshop/Dockerfile installs exactly",
             "# these (pip install --no-deps -r), then the package itself with --no-deps."),
        what=("# {date}) from pip's resolution of `{target}`: the webshop extra and the core",
              "# dependencies the server imports; not {left_out}, nor what only they need.")),
    "alfworld": Image(
        "alfworld", ("alfworld", "openenv"),
        how=("# The ALFWorld server image's dependencies, pinned: docker/alfworld/Dockerfile builds wheels of",
             "# exactly these (pip wheel --no-deps -r) and installs them, then the package itself with --no-deps."),
        what=("# {date}) from pip's resolution of `{target}`: those extras and the",
              "# core dependencies the server imports; not {left_out}, unless an extra needs them.")),
}


def server_roots(pyproject: dict, extras: Sequence[str]) -> list[Requirement]:
    """A server's direct requirements: the ``extras`` and the core dependencies that are not in
    :data:`NOT_IN_IMAGE`."""
    project = pyproject["project"]
    core = [Requirement(r) for r in project["dependencies"]]
    wanted = [Requirement(r) for e in extras for r in project["optional-dependencies"][e]]
    return [r for r in core if canonicalize_name(r.name) not in NOT_IN_IMAGE] + wanted


def resolve(target: str) -> dict[str, dict]:
    """pip's resolution of ``target`` (nothing installed): canonical name -> report entry."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-qq",
                        "--report", str(report), target], check=True, cwd=REPO)
        entries = json.loads(report.read_text())["install"]
    return {canonicalize_name(e["metadata"]["name"]): e for e in entries}


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))


def closure(roots: list[Requirement], resolved: dict[str, dict]) -> dict[str, str]:
    """Every package the roots need (with their extras and markers), name -> pinned version."""
    todo = [r for r in roots if _applies(r, set())]
    extras: dict[str, set[str]] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        new = set(req.extras) - extras.get(name, set())
        if name in extras and not new:
            continue
        extras.setdefault(name, set()).update(new)
        meta = resolved[name]["metadata"]
        todo += [d for d in map(Requirement, meta.get("requires_dist") or []) if _applies(d, extras[name])]
    return {resolved[n]["metadata"]["name"]: resolved[n]["metadata"]["version"] for n in extras}


def render(image: Image, pins: dict[str, str]) -> str:
    """The lock file's text: a header saying how it was made, then ``name==version`` lines."""
    made = (f"# Generated by `{image.command}` (Python {platform.python_version()}, {platform.system()} "
            f"{platform.machine()},")
    fill = {"date": datetime.date.today().isoformat(), "target": image.target,
            "left_out": ", ".join(sorted(NOT_IN_IMAGE))}
    head = [*image.how, made, *(line.format(**fill) for line in image.what),
            "# Edit pyproject.toml, then regenerate; never edit this file by hand."]
    return "\n".join(head + [f"{n}=={v}" for n, v in sorted(pins.items(), key=lambda kv: kv[0].lower())]) + "\n"


def body(text: str) -> list[str]:
    """The pins of a lock file's text (its comment lines left out)."""
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def main(name: str | None = None, argv: Sequence[str] | None = None) -> None:
    """Write (or ``--check``) image ``name``'s lock; without ``name`` the image is an argument."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    if name is None:
        ap.add_argument("image", choices=sorted(IMAGES), help="the image whose lock to write")
    ap.add_argument("--check", action="store_true", help="exit 1 if the lock is out of date (writes nothing)")
    args = ap.parse_args(argv)
    image = IMAGES[name or args.image]
    if sys.version_info[:2] != (3, 11):
        raise SystemExit(f"run this with Python 3.11 (the image's), not {platform.python_version()}")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    text = render(image, closure(server_roots(pyproject, image.extras), resolve(image.target)))
    if args.check:
        same = image.lock.exists() and body(image.lock.read_text()) == body(text)
        print(f"{image.lock}: {'up to date' if same else f'out of date: run {image.command}'}")
        raise SystemExit(0 if same else 1)
    image.lock.write_text(text)
    print(f"wrote {image.lock}: {len(body(text))} packages")


if __name__ == "__main__":
    main()
