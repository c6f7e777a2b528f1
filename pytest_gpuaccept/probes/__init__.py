"""One module per tool: a pure parse_* over text and a thin run_* that calls the tool."""

from __future__ import annotations

import re

# ECMA-48 control sequences (CSI: ESC [ ... final byte, e.g. the underline `\x1b[4m` current drivers put
# around `nvidia-smi topo -m`'s header even when piped), OSC strings (ESC ] ... BEL or ESC \\), the other
# escapes (ESC, intermediates 0x20-0x2F, a final byte: charset designations such as ESC ( B) and the 8-bit CSI.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]|\x9b[0-?]*[ -/]*[@-~]")


def strip_escapes(text: str) -> str:
    """The text a person sees: terminal escape sequences removed (the raw bytes stay as evidence)."""
    return _ESCAPES.sub("", text) if "\x1b" in text or "\x9b" in text else text


def option_value(argv: tuple[str, ...] | list[str], *names: str) -> str | None:
    """The value a command line gives an option, as getopt reads it: the last `NAME VALUE`, or `--NAME=VALUE` for a
    long option (a short one takes no `=`); None where it is absent."""
    value = None
    for n, word in enumerate(argv):
        for name in names:
            if word == name and n + 1 < len(argv):
                value = argv[n + 1]
            elif name.startswith("--") and word.startswith(name + "="):
                value = word.split("=", 1)[1]
    return value


class ParseError(ValueError):
    """Output a parser cannot read with certainty; names the tool and quotes the line."""

    def __init__(self, tool: str, message: str, line: str | None = None) -> None:
        quoted = f": {line.strip()[:200]!r}" if line is not None else ""
        super().__init__(f"{tool}: {message}{quoted}")
        self.tool = tool
        self.message = message
