"""The one record of the plugin's options a run is configured from, each value with every place it was given
(pytest-timeout's Settings). The options themselves are declared once, in plugin.py (`_OPTIONS`: the command line
and the ini file alike), which this reads them by.

Where a value came from matters here: an option that chooses where readings come from (a recording, a replayed
bundle, another sysfs tree) replaces what the host measures, and only the person at the command line may ask for
that (an ini file in any parent folder, addopts or the environment belong to whoever controls the host).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# The options that choose where readings come from, and why only the command line may give them.
COMMAND_LINE_ONLY = {"gpuaccept_nvml": "a recording or replay replaces what this host measures",
                     "gpuaccept_replay": "a recording or replay replaces what this host measures",
                     "gpuaccept_sysfs": "another sysfs tree replaces this host's own",
                     "gpuaccept_rerun_failed": "an earlier bundle chooses what is measured again and what is not"}
COMMAND_LINE = "the command line"


@dataclass(frozen=True, slots=True)
class Setting:
    """One option's value (None: not given) and every place it was given, the one in effect first."""

    flag: str
    ini: str
    value: str | None
    places: tuple[str, ...]  # COMMAND_LINE, "PYTEST_ADDOPTS", "the ini addopts", "the ini option <name>", ...


@dataclass(frozen=True, slots=True)
class Settings:
    """Every option of the plugin, read once from pytest's config."""

    contract: Setting
    json: Setting
    replay: Setting
    nvml: Setting
    sysfs: Setting
    node: Setting
    lang: Setting
    rerun_failed: Setting

    def misplaced(self) -> str | None:
        """The usage error where an option that replaces the host's readings was given anywhere but on the command
        line (as well as there, or instead); None where it was given there alone, or not at all."""
        for setting in (self.nvml, self.replay, self.sysfs, self.rerun_failed):
            elsewhere = [place for place in setting.places if place != COMMAND_LINE]
            if elsewhere:
                return (f"{setting.flag} may only be given on the command line, not in {elsewhere[0]}: "
                        f"{COMMAND_LINE_ONLY[setting.ini]}")
        return None


def _places(config: Any, flag: str, ini: str) -> tuple[str, ...]:
    """Every place the option was given: the command line the person typed first (its value is the one in effect),
    then PYTEST_ADDOPTS, the ini addopts, something else that set it (another plugin), the ini option."""
    typed = any(a == flag or a.startswith(flag + "=") for a in map(str, config.invocation_params.args))
    env = flag in os.environ.get("PYTEST_ADDOPTS", "")
    addopts = any(flag in str(arg) for arg in config.getini("addopts"))
    other = config.getoption(ini) is not None and not (typed or env or addopts)
    found = [(typed, COMMAND_LINE), (env, "PYTEST_ADDOPTS"), (addopts, "the ini addopts"),
             (other, "somewhere other than the command line"), (bool(config.getini(ini)), f"the ini option {ini}")]
    return tuple(place for given, place in found if given)


def settings(config: Any, options: tuple[tuple[str, str, str, str], ...]) -> Settings:
    """The record of every option (`options`: plugin._OPTIONS), built once by plugin.pytest_configure."""
    found = {}
    for flag, ini, _metavar, _help in options:
        value = config.getoption(ini)
        if value is None:
            value = config.getini(ini) or None
        found[ini] = Setting(flag, ini, None if value is None else str(value), _places(config, flag, ini))
    return Settings(found["gpuaccept_contract"], found["gpuaccept_json"], found["gpuaccept_replay"],
                    found["gpuaccept_nvml"], found["gpuaccept_sysfs"], found["gpuaccept_node"], found["gpuaccept_lang"],
                    found["gpuaccept_rerun_failed"])
