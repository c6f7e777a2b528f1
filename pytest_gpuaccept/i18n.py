"""The words a buyer reads, in the buyer's language: `--gpuaccept-lang` (en, zh-CN).

A message is written once, in English, as a `str.format` template; `tr(lang, template, **fields)` gives it in the
language asked for, from that language's catalog (lang/<lang>.json: English template -> translated template).
Figures, units and clause keys are fields, never translated; the results JSON keeps its English keys.
A template a catalog lacks is given in English (tests list them: none for the report, the terminal's verdict
lines, doctor and verify).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

LANGS = ("en", "zh-CN")
DEFAULT = "en"


@cache
def catalog(lang: str) -> dict[str, str]:
    """The language's catalog; English has none (its templates are the source)."""
    if lang == DEFAULT:
        return {}
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}: expected one of {', '.join(LANGS)}")
    text = files("pytest_gpuaccept").joinpath("lang").joinpath(f"{lang}.json").read_text(encoding="utf-8")
    table = json.loads(text)
    assert isinstance(table, dict)
    return {str(k): str(v) for k, v in table.items()}


def tr(lang: str, template: str, **fields: object) -> str:
    """The template in the language asked for, its fields filled in."""
    translated = catalog(lang).get(template, template)
    return translated.format(**fields) if fields else translated


def missing(lang: str, templates: list[str]) -> list[str]:
    """The templates the language's catalog lacks."""
    table = catalog(lang)
    return [t for t in templates if t not in table] if lang != DEFAULT else []


def language(config: Any) -> str:
    """The buyer's language of a pytest run (--gpuaccept-lang or its ini twin, where the plugin declares them), else
    English; plugin.py refuses an unknown one before anything runs."""
    lang = config.getoption("gpuaccept_lang", default=None)
    if lang is None:
        try:
            lang = config.getini("gpuaccept_lang") or None
        except ValueError:  # no such ini option declared
            lang = None
    return str(lang) if lang in LANGS else DEFAULT
