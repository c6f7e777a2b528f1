"""PyYAML, imported through here: the one place that makes its import cost less.

`import yaml` compiles the pure-Python reader's NON_PRINTABLE pattern: a character class that spans Unicode,
whose compilation walks 63,000 code points one by one in Python. That was 10 ms of every run's 0.2 s of
overhead (benchmarks/overhead.py), for a pattern the contract's reading never uses on the way that succeeds
(libyaml composes it; the pure-Python reader reads again only what libyaml refused, for its error message).

So, before PyYAML is first imported, the `re` module's cache is given, under that pattern's exact text, the
same class written as its complement: the 2,111 code points it matches, compiled in 0.2 ms. A search with the
one finds what a search with the other finds (tests/test_contract.py tries all 1,114,112 code points). Nothing
is done where PyYAML is already imported, where the cache is not the dict CPython keeps (3.8 to 3.14), or where
the text is already cached; a PyYAML whose pattern reads otherwise simply compiles its own.
"""

from __future__ import annotations

import re
import sys

# PyYAML's yaml/reader.py, Reader.NON_PRINTABLE (unchanged from 3.x to 6.0.x); and the same set, complemented:
# C0 controls but tab, LF and CR; DEL and C1 controls but NEL (U+85); the surrogates; U+FFFE and U+FFFF.
PYYAML_NON_PRINTABLE = "[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]"
SAME_SET = "[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x84\x86-\x9F\uD800-\uDFFF\uFFFE\uFFFF]"


def _seed_reader_pattern() -> None:
    cache = getattr(re, "_cache", None)
    if "yaml" in sys.modules or not (3, 8) <= sys.version_info[:2] <= (3, 14) or type(cache) is not dict:
        return
    cache.setdefault((str, PYYAML_NON_PRINTABLE, 0), re.compile(SAME_SET))


_seed_reader_pattern()

import yaml as yaml  # noqa: E402  (after the seed: that is the point) - re-exported

__all__ = ["yaml"]
