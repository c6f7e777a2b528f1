"""The `nics`, `rdma` and `iperf3` sections: link speed (ethtool), RDMA bandwidth (ib_write_bw), TCP (iperf3)."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks
from pytest_gpuaccept.probes import ethtool, ib_write_bw, iperf3
from pytest_gpuaccept.probes._run import parse_run

RDMA_BASE_PORT = 18515  # perftest's default; each device gets its own port


@pytest.mark.gpuaccept("nics")
def test_nic_speed(nic, gpuaccept_contract, gpuaccept_runner, gpuaccept_host_names, gpuaccept_judge):
    pattern, name = nic
    minimum = gpuaccept_contract.nics.min_speed.gbit_s
    if name is None:
        gpuaccept_judge(checks.no_match("nics", pattern, gpuaccept_host_names[0], "Gb/s", f">= {minimum:g}"))
        return
    unsafe = checks.unsafe_name("nics", name, "Gb/s", f">= {minimum:g}")
    if unsafe:
        gpuaccept_judge(unsafe)
        return
    reading = parse_run(ethtool.run_ethtool(gpuaccept_runner, name), ethtool.parse_ethtool)
    gpuaccept_judge(checks.nic_speed(reading, name, minimum))


@pytest.mark.gpuaccept("rdma")
def test_rdma_bandwidth(rdma_device, gpuaccept_contract, gpuaccept_runner, gpuaccept_host_names,
                        gpuaccept_ib_ports, gpuaccept_judge):
    pattern, device = rdma_device
    clause = gpuaccept_contract.rdma
    required = f">= {clause.min_fraction_of_line_rate:g} x line rate"
    if device is None:
        gpuaccept_judge(checks.no_match("rdma", pattern, gpuaccept_host_names[1], "Gb/s", required))
        return
    unsafe = checks.unsafe_name("rdma", device, "Gb/s", required)
    if unsafe:
        gpuaccept_judge(unsafe)
        return
    ports, evidence = gpuaccept_ib_ports(device)
    port = next((p for p in ports if p.active), ports[0] if ports else None)
    if clause.line_rate is not None:
        line_rate, source = clause.line_rate.gbit_s, "from the contract"
    else:
        line_rate = port.rate_gbit_s if port is not None else None
        source = f"port {port.port} rate in sysfs" if port is not None else "no port in sysfs"
    if port is None or not port.active or line_rate is None:
        # Nothing to measure through: judged on the port alone, no tool runs.
        gpuaccept_judge(checks.rdma_bandwidth(None, device, port, line_rate, source,
                                              clause.min_fraction_of_line_rate, (evidence,)))
        return
    gid = port.roce_v2_gid_index if port.link_layer == "Ethernet" else None
    offset = sorted(gpuaccept_host_names[1]).index(device) if device in gpuaccept_host_names[1] else 0
    commands = ib_write_bw.commands(device, clause.message_size.nbytes, RDMA_BASE_PORT + offset, clause.peer, gid)
    runs = gpuaccept_runner.run_together(commands, timeout_s=min(gpuaccept_runner.default_timeout_s, 120.0))
    client = parse_run(runs[-1], ib_write_bw.parse_ib_write_bw)
    if len(runs) > 1 and runs[0].failure and not client.failure:
        client = parse_run(runs[0], ib_write_bw.parse_ib_write_bw)  # the server failed: say so
    gpuaccept_judge(checks.rdma_bandwidth(client, device, port, line_rate, source,
                                          clause.min_fraction_of_line_rate, (evidence,)))


@pytest.mark.gpuaccept("iperf3")
def test_iperf3_throughput(gpuaccept_contract, gpuaccept_runner, gpuaccept_judge):
    clause = gpuaccept_contract.iperf3
    version_run = iperf3.run_version(gpuaccept_runner)
    version = None if version_run.failure else iperf3.parse_version(version_run.stdout + version_run.stderr)
    commands = iperf3.client_commands(clause.server, clause.port, clause.streams, clause.duration.seconds, version)
    timeout = clause.duration.seconds + 60.0
    runs = gpuaccept_runner.run_together(commands, timeout_s=timeout) if not version_run.failure else [version_run]
    readings = [parse_run(run, iperf3.parse_iperf3_json) for run in runs]
    shown = ".".join(map(str, version)) if version else "unknown"
    if len(commands) > 1:
        note = (f"iperf3 {shown} is single-threaded: {len(commands)} client processes on ports "
                f"{clause.port}-{clause.port + len(commands) - 1}, summed")
    else:
        note = f"iperf3 {shown}, one process, {clause.streams} streams"
    gpuaccept_judge(checks.iperf3_throughput(readings, clause.server, clause.min_throughput.gbit_s, note))
