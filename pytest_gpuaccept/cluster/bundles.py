"""A node's bundle on its way back to the login node, with no shared filesystem: the node's run prints its
bundle (a tar of its report folder) as base64 lines on stdout, each line tagged with the node's name and
its sequence number, then an end line with the count and the SHA-256 of the tar. Lines of several nodes
may interleave (one launcher's output); each node's lines are picked out, ordered and checked here.

Pure functions: encoding on the node, decoding (and refusing anything short, reordered or altered) on
the login node.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path, PurePosixPath

from .engine import ClusterError

NODES_FOLDER = "nodes"  # in the login node's evidence: nodes/<node>/ holds that node's bundle
TAG = "gpuaccept-bundle"
END = "gpuaccept-bundle-end"
LINE_BYTES = 3 * 1024  # of the tar in one line (4 KiB of base64): far below any launcher's line limit
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 5000


def pack(folder: Path) -> bytes:
    """The folder as an uncompressed-names, gzip'd tar: regular files only, relative paths, sorted."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def encode(node: str, data: bytes) -> list[str]:
    chunks = [data[i:i + LINE_BYTES] for i in range(0, len(data), LINE_BYTES)] or [b""]
    lines = [f"{TAG} {node} {n} {base64.b64encode(chunk).decode()}" for n, chunk in enumerate(chunks)]
    return [*lines, f"{END} {node} {len(chunks)} {hashlib.sha256(data).hexdigest()}"]


def _tagged(line: str) -> list[str]:
    """A bundle line's words from its tag on (a launcher may prefix a label, "0: " or "[1,0]<stdout>:", so the tag
    is found wherever it starts); [] for any other line."""
    parts = line.strip().split(" ")
    for tag in (TAG, END):
        if tag in parts:
            return parts[parts.index(tag):]
    return []


def decode(node: str, output: str) -> bytes:
    """This node's tar from a launcher's output (other lines, other nodes' lines ignored); ClusterError if it
    is missing, incomplete, duplicated or does not match its SHA-256."""
    chunks: dict[int, bytes] = {}
    end: tuple[int, str] | None = None
    for line in output.splitlines():
        parts = _tagged(line)
        if len(parts) != 4 or parts[1] != node:
            continue
        if parts[0] == END:
            if end is not None:
                raise ClusterError(f"node {node}: two bundle end lines")
            end = (int(parts[2]), parts[3]) if parts[2].isdigit() else (-1, "")
            continue
        if not parts[2].isdigit() or int(parts[2]) in chunks:
            raise ClusterError(f"node {node}: a bundle line out of sequence")
        try:
            chunks[int(parts[2])] = base64.b64decode(parts[3], validate=True)
        except ValueError:
            raise ClusterError(f"node {node}: a bundle line that is not base64") from None
    if end is None:
        raise ClusterError(f"node {node} returned no bundle" + (f" (only {len(chunks)} of its lines)" if chunks else ""))
    count, digest = end
    if sorted(chunks) != list(range(count)):
        raise ClusterError(f"node {node}: the bundle is incomplete ({len(chunks)} of {count} lines)")
    data = b"".join(chunks[n] for n in range(count))
    if hashlib.sha256(data).hexdigest() != digest:
        raise ClusterError(f"node {node}: the bundle does not match its SHA-256")
    if len(data) > MAX_BUNDLE_BYTES:
        raise ClusterError(f"node {node}: the bundle is over {MAX_BUNDLE_BYTES} bytes")
    return data


def members(data: bytes) -> dict[str, bytes]:
    """The tar's regular files by relative path; anything else (links, devices, absolute or .. paths) refused."""
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for n, info in enumerate(tar):
                if n >= MAX_MEMBERS:
                    raise ClusterError(f"the bundle has over {MAX_MEMBERS} files")
                path = PurePosixPath(info.name)
                if not info.isfile() or path.is_absolute() or ".." in path.parts or not path.parts:
                    raise ClusterError(f"the bundle holds {info.name!r}, which is not a plain relative file")
                handle = tar.extractfile(info)
                out[path.as_posix()] = handle.read() if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ClusterError(f"the bundle is not a readable tar: {exc}") from None
    return out
