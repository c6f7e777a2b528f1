"""Text and JSON from someone else's bundle, made safe to parse and to show.

A bundle is made by the vendor and verified on the buyer's machine: every string in it may be built to fool the
buyer's terminal (an escape sequence that erases a FAIL line or writes the clipboard), the buyer's eyes (a
right-to-left override, a zero-width character inside a name) or the parser (a key given twice, NaN, JSON nested a
hundred thousand deep). `strict_json` parses only what format 1 writes; `shown` makes any string one visible line.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_JSON_DEPTH = 64  # a results file nests 6 deep, a cluster's hosts 8: 64 is far above any honest document
MAX_SHOWN = 400  # characters of one bundle string on one terminal line

# What a terminal or a page acts on rather than shows: C0 and C1 controls (ESC starts every escape sequence, CSI
# is one character in C1), DEL, the bidirectional overrides, embeddings and isolates, the zero-width characters
# and marks that hide or reorder what a reader sees, the line and paragraph separators, and the byte order mark.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]")


class Untrusted(ValueError):
    """A bundle's document that format 1 never writes: one line, naming the file."""


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str, keep: str = "") -> str:
    """Every character a terminal or a browser would act on, or that hides what a reader sees, written as its
    escape (ESC as \\x1b, U+202E as \\u202e); the rest as it is, and the characters of `keep` ("\\t\\n" for a
    tool's output in a terminal; a page keeps "\\r" too, which a terminal would act on)."""
    return UNSAFE.sub(lambda found: found.group() if found.group() in keep else _escape(found), text)


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """A bundle's string as one safe terminal line of at most `limit` characters (and a mark of what was cut)."""
    text = escaped(str(value))
    return text if len(text) <= limit else f"{text[:limit]}[... {len(text) - limit} more characters]"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise Untrusted(f"the key {shown(key, 80)!r} is given twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> float:
    raise Untrusted(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise Untrusted(f"{shown(text, 40)} is beyond what a float holds")
    return number


def _depth(value: Any) -> int:
    """How deep the document nests (lists and objects), walked without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                return level
            todo += [(child, level + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def strict_json(data: bytes | str, name: str) -> Any:
    """Parse `data` as the JSON this project writes: UTF-8, every key once per object, no NaN or Infinity, numbers
    finite, at most MAX_JSON_DEPTH deep. Raises Untrusted naming `name` and what is wrong."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                           parse_float=_finite_float)
    except Untrusted as exc:
        raise Untrusted(f"{shown(name, 200)}: {exc}") from None
    except RecursionError:
        raise Untrusted(f"{shown(name, 200)}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Untrusted(f"{shown(name, 200)}: not JSON ({shown(exc, 120)})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise Untrusted(f"{shown(name, 200)}: nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def finite(value: Any) -> float | None:
    """A number to compute with: an int or float that is finite (never a bool, NaN or an infinity); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
