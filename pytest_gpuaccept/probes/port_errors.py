"""sysfs: the error counters of RDMA ports (InfiniBand and RoCE) and of network interfaces, as the kernel keeps them.

RDMA: /sys/class/infiniband/DEV/ports/N/counters/{symbol_error, link_downed, ...} (the IBTA PortCounters the driver
reads from the port) and, on mlx5, ports/N/hw_counters/{out_of_sequence, packet_seq_err, local_ack_timeout_err}.
Interfaces: /sys/class/net/IF/statistics/{rx_errors, rx_crc_errors, ...} (struct rtnl_link_stats64, filled by the
driver: mlx5 counts rx_crc_errors from the port's frame check sequence errors). Each file holds one decimal number.
Readers return plain dicts (kept as evidence and replayed); a counter that cannot be read is listed in `missing`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import counters

# IBTA PortCounters and their widths: a counter at its width's maximum has stopped counting (it saturates, never wraps)
IB_ERRORS = {"symbol_error": 0xFFFF, "link_downed": 0xFF, "link_error_recovery": 0xFF, "port_rcv_errors": 0xFFFF,
             "local_link_integrity_errors": 0xF, "excessive_buffer_overrun_errors": 0xF}
HW_ERRORS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")  # mlx5 hw_counters, 64-bit
# Interface statistics whose growth is an error of the link or the port; drops (a full ring, a protocol nobody
# listens to, rx_missed_errors: mlx5's rx_out_of_buffer) happen on honest hosts under load and are only recorded.
NET_ERRORS = ("rx_errors", "rx_crc_errors", "rx_frame_errors", "rx_length_errors", "rx_over_errors", "rx_fifo_errors",
              "tx_errors", "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors")
NET_RECORDED = ("rx_dropped", "tx_dropped", "rx_missed_errors")


def _numbers(folder: Path, names: tuple[str, ...]) -> tuple[dict[str, int], list[str]]:
    values: dict[str, int] = {}
    missing: list[str] = []
    for name in names:
        try:
            text = (folder / name).read_text().strip()
        except OSError:
            missing.append(name)
            continue
        if text.isdigit():
            values[name] = int(text)
        else:
            missing.append(name)
    return values, missing


def read_ib_errors(sys_root: Path, device: str) -> dict[str, Any]:
    """Every port of an RDMA device: its error counters (`counters`), mlx5's hw_counters (`hw_counters`, None where
    the port has no such folder), and the counters that could not be read (`missing`)."""
    ports_dir = sys_root / "class" / "infiniband" / device / "ports"
    if not ports_dir.is_dir():
        return {"device": device, "error": f"{ports_dir} cannot be listed", **counters.clocks()}
    ports: dict[str, Any] = {}
    for port in sorted(ports_dir.iterdir(), key=lambda p: p.name):
        standard, missing = _numbers(port / "counters", tuple(IB_ERRORS))
        hw: dict[str, int] | None = None
        if (port / "hw_counters").is_dir():
            hw, hw_missing = _numbers(port / "hw_counters", HW_ERRORS)
            missing += [f"hw_counters/{name}" for name in hw_missing]
        ports[port.name] = {"counters": standard, "hw_counters": hw, "missing": missing}
    return {"device": device, "ports": ports, **counters.clocks()}


def read_net_errors(sys_root: Path, interface: str) -> dict[str, Any]:
    """An interface's error statistics (`statistics`), the drops it only records, and what could not be read."""
    folder = sys_root / "class" / "net" / interface / "statistics"
    if not folder.is_dir():
        return {"interface": interface, "error": f"{folder} cannot be listed", **counters.clocks()}
    values, missing = _numbers(folder, NET_ERRORS + NET_RECORDED)
    return {"interface": interface, "statistics": values,
            "missing": [name for name in missing if name in NET_ERRORS], **counters.clocks()}
