"""WebShop data commands: ``rubricgym data webshop`` and ``rubricgym data generate-webshop``.

* ``rubricgym data webshop --from DIR`` checks upstream's files in DIR against their
  published sha256 and installs them where ``WebShop-Rubric-v0`` (``catalogue="auto"``)
  finds them (``$RUBRICGYM_WEBSHOP_DATA`` or ``~/.cache/rubricgym/webshop``).
* ``rubricgym data generate-webshop --out DIR`` writes a seeded generated catalogue in
  upstream's raw format (``items_shuffle.json``, ``items_ins_v2.json``, ``items_human_ins.json``).

Nothing heavy is imported at module import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import typer

__all__ = ["generate_webshop", "install_webshop_data", "register"]


def install_webshop_data(
    source: Path = typer.Option(..., "--from", help="Directory holding upstream's WebShop JSON files."),
    dest: Path | None = typer.Option(None, "--dest", help="Install here instead of the default data directory."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check the published sha256 values."),
) -> None:
    """Verify upstream WebShop files (published sha256) and install them.

    Each file is copied to a temporary file in the destination, checked, and renamed onto its
    name only when all are there: an interrupted install never leaves a partial file under a
    final name, and a link already at a final name is replaced, never written through.
    """
    from rich.console import Console

    from agent_envs.webshop.catalogue import (
        CatalogueError,
        default_data_dir,
        find_real_files,
        verify_files,
    )

    console = Console()
    try:
        paths = find_real_files(source)
        if paths is None:
            console.print(f"[red]error:[/red] {source}: no complete WebShop file set (items_shuffle_1000.json + "
                          "items_ins_v2_1000.json + items_human_ins.json)", soft_wrap=True)
            raise typer.Exit(1)
        digests = verify_files(paths, strict=verify) if verify else {}
        target = (dest or default_data_dir()).expanduser()
        installed = _install_files(paths, target, digests)
    except (CatalogueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    for p, dst in zip(paths, installed):
        console.print(f"{p.name}: {digests.get(p.name, 'unverified')} -> {dst}")
    console.print(f"[green]installed WebShop data in {target}[/green]")


def _install_files(paths: Sequence[Path], target: Path, digests: dict[str, str]) -> list[Path]:
    """Copy ``paths`` into ``target`` under their names, all or nothing: each to a temporary
    file there (its sha256 checked against ``digests`` where given, so a file changed since it
    was verified is refused), then every one renamed onto its final name."""
    from agent_envs.webshop.catalogue import CatalogueError

    target.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, Path]] = []
    try:
        for p in paths:
            dst = target / p.name
            if not dst.is_symlink() and dst.exists() and os.path.samefile(p, dst):
                continue  # installing the folder onto itself
            tmp, digest = _copy_to_temp(p, target)
            staged.append((tmp, dst))
            if p.name in digests and digest != digests[p.name]:
                raise CatalogueError(f"{p}: changed while it was installed (sha256 {digest}, verified as "
                                     f"{digests[p.name]})")
        for tmp, dst in staged:
            os.replace(tmp, dst)  # replaces a link at dst, never writes through it
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return [target / p.name for p in paths]


def _copy_to_temp(src: Path, folder: Path) -> tuple[str, str]:
    """Copy ``src`` to a new temporary file in ``folder``; returns its path and the sha256 of
    what was written (flushed to disk before it returns)."""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=f".{src.name}.", suffix=".part", dir=folder)
    try:
        with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            for chunk in iter(lambda: fin.read(1 << 20), b""):
                digest.update(chunk)
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp, digest.hexdigest()


def generate_webshop(
    out: Path = typer.Option(..., "--out", help="Directory to write the three JSON files to."),
    num_products: int = typer.Option(1000, "--num-products", min=1, help="Number of products (at most 100,000)."),
    seed: int = typer.Option(0, "--seed", help="Generator seed."),
) -> None:
    """Write a seeded generated WebShop catalogue in upstream's raw format."""
    from rich.console import Console

    from agent_envs.webshop.generator import generate_raw, write_raw

    console = Console()
    try:
        raw = generate_raw(num_products, seed)
    except ValueError as exc:  # more products than the generator makes
        console.print(f"[red]error:[/red] --num-products: {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        paths = write_raw(raw, out)
    except OSError as exc:
        console.print(f"[red]error:[/red] --out {out}: {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    for key, path in paths.items():
        console.print(f"{key}: {path}")
    n_human = sum(len(v) for v in raw.items_human_ins.values())
    console.print(f"[green]{len(raw.items_shuffle)} products, {n_human} human instructions[/green]")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add the WebShop data commands to the CLI."""
    data_app.command("webshop")(install_webshop_data)
    data_app.command("generate-webshop")(generate_webshop)
