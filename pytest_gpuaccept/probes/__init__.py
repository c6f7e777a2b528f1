"""One module per tool: a pure parse_* over text and a thin run_* that calls the tool."""

from __future__ import annotations


class ParseError(ValueError):
    """Output a parser cannot read with certainty; names the tool and quotes the line."""

    def __init__(self, tool: str, message: str, line: str | None = None) -> None:
        quoted = f": {line.strip()[:200]!r}" if line is not None else ""
        super().__init__(f"{tool}: {message}{quoted}")
        self.tool = tool
        self.message = message
