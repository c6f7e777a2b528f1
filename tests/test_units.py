import pytest

from pytest_gpuaccept.units import UnitError, mib_s_to_gbit, parse_bandwidth, parse_duration, parse_size


@pytest.mark.parametrize("text, gbit", [
    ("450 GB/s", 3600.0), ("100 Gb/s", 100.0), ("100 Gbps", 100.0), ("100 Gbit/s", 100.0),
    ("400 Mb/s", 0.4), ("1.6 Tb/s", 1600.0), ("25 MB/s", 0.2), ("1 TB/s", 8000.0),
])
def test_bandwidths_convert_to_bits(text, gbit):
    assert parse_bandwidth(text).gbit_s == pytest.approx(gbit)


@pytest.mark.parametrize("value", [450, "450", "450 gb/s", "fast", "-1 GB/s", "0 GB/s", True, None, "450 GiB/s"])
def test_a_bandwidth_needs_a_known_unit(value):
    with pytest.raises(UnitError, match="expected a"):
        parse_bandwidth(value)


@pytest.mark.parametrize("text, nbytes", [
    ("8 GiB", 8 * 2**30), ("80 GB", 80 * 10**9), ("1 MiB", 2**20), ("512 B", 512), ("64 KiB", 65536),
])
def test_sizes(text, nbytes):
    assert parse_size(text).nbytes == nbytes


def test_a_size_without_unit_is_refused():
    with pytest.raises(UnitError, match=r"expected a size such as '8 GiB', got '512'"):
        parse_size("512")


@pytest.mark.parametrize("text, seconds", [("60 s", 60), ("10 min", 600), ("500 ms", 0.5), ("1 h", 3600)])
def test_durations(text, seconds):
    assert parse_duration(text).seconds == seconds


def test_perftest_megabytes_are_mebibytes():
    assert mib_s_to_gbit(10787.86) == pytest.approx(90.495, abs=0.001)
