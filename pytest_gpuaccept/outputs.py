"""Where verify, replay and compare write: only where the buyer said, never through a link, never inside a bundle
they read.

A bundle may hold a link named like the buyer's output (`recheck -> ~/.ssh`, `compare.html -> ~/.bashrc`), or the
buyer may name a folder inside it by mistake: either way the write is refused before anything is written, one line
naming the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from .untrusted import shown


class Unwritable(ValueError):
    """An output the verifier will not write: one line, naming it."""


def _inside(path: Path, folders: tuple[Path, ...]) -> Path | None:
    """The bundle `path` lies in, as written or once its links are followed (`BUNDLE/recheck` where recheck is a
    link out of the bundle is inside it all the same)."""
    for candidate in (Path(os.path.abspath(path)), path.resolve()):
        for folder in folders:
            for root in (Path(os.path.abspath(folder)), folder.resolve()):
                if candidate == root or root in candidate.parents:
                    return folder
    return None


def output_folder(path: Path, bundles: tuple[Path, ...], what: str) -> Path:
    """`path` made ready for a run's outputs: a new or empty folder, not a link, outside every bundle in
    `bundles`; Unwritable (one line) otherwise."""
    inside = _inside(path, bundles)
    if inside is not None:
        raise Unwritable(f"{what} {shown(path)} is inside the bundle {shown(inside)}: a re-judge never writes inside "
                         "the bundle it reads")
    if path.is_symlink():
        raise Unwritable(f"{what} {shown(path)} is a symbolic link: not written through")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise Unwritable(f"{what} {shown(path)} exists and is not an empty folder: name a new one")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_output(path: Path, text: str, bundles: tuple[Path, ...], what: str) -> None:
    """Write `text` to the file `path`, never inside a bundle in `bundles` and never through a link (O_NOFOLLOW:
    a link where the file would be is refused, not followed)."""
    inside = _inside(path, bundles)
    if inside is not None:
        raise Unwritable(f"{what} {shown(path)} is inside the bundle {shown(inside)}: not written")
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise Unwritable(f"{what} {shown(path)}: cannot be written ({exc.strerror})") from None
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
