"""A node's bundle through a launcher's output: picked out of interleaved, labelled lines, and refused when it
is short, altered, duplicated, or holds anything but plain relative files."""

from __future__ import annotations

import io
import random
import tarfile

import pytest

from pytest_gpuaccept.cluster.bundles import decode, encode, members, pack
from pytest_gpuaccept.cluster.engine import ClusterError


@pytest.fixture
def bundle(tmp_path):
    (tmp_path / "gpuaccept-evidence").mkdir()
    (tmp_path / "gpuaccept-results.json").write_text('{"verdict": "accepted"}')
    (tmp_path / "gpuaccept-evidence" / "nvml-host.json").write_bytes(random.Random(1).randbytes(20_000))
    return pack(tmp_path)


def test_two_nodes_lines_interleaved_and_labelled_come_apart(bundle):
    other = pack_text({"x.txt": b"other node"})
    lines_a, lines_b = encode("gpu01", bundle), encode("gpu02", other)
    mixed = []
    for n in range(max(len(lines_a), len(lines_b))):  # srun -l labels and Open MPI's tags, lines interleaved
        mixed += [f"0: {line}" for line in lines_a[n:n + 1]] + [f"[1,0]<stdout>: {line}" for line in lines_b[n:n + 1]]
    mixed.insert(3, "srun: warning: something unrelated")
    assert decode("gpu01", "\n".join(mixed)) == bundle
    assert members(decode("gpu02", "\n".join(mixed))) == {"x.txt": b"other node"}
    assert set(members(bundle)) == {"gpuaccept-results.json", "gpuaccept-evidence/nvml-host.json"}


@pytest.mark.parametrize("damage, message", [
    (lambda lines: lines[:-1], "returned no bundle"),
    (lambda lines: lines[:1] + lines[2:], "the bundle is incomplete"),
    (lambda lines: lines[:1] + lines, "out of sequence"),
    (lambda lines: [lines[0][:-8] + "AAAAAAAA", *lines[1:]], "does not match its SHA-256"),
    (lambda lines: [], "returned no bundle"),
])
def test_a_short_altered_or_repeated_bundle_is_refused(bundle, damage, message):
    with pytest.raises(ClusterError, match=message):
        decode("gpu01", "\n".join(damage(encode("gpu01", bundle))))


@pytest.mark.parametrize("name, kind", [("../../etc/cron.d/x", tarfile.REGTYPE), ("/etc/passwd", tarfile.REGTYPE),
                                        ("link", tarfile.SYMTYPE)])
def test_a_bundle_that_would_write_outside_its_folder_is_refused(name, kind):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/shadow" if kind == tarfile.SYMTYPE else ""
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ClusterError, match="not a plain relative file"):
        members(buffer.getvalue())


def pack_text(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
