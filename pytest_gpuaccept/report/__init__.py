"""The report: the results JSON and evidence manifest (results, collect), pytest-html's page (page, details,
table) and the pytest hooks that drive them (hooks). A section that needs its own part of the page (a heat map,
a cluster's nodes) declares it in the registry's REPORT_PARTS; nothing here names a clause."""

from .hooks import ReportPlugin
from .page import banner
from .results import CHECK_PROPERTY, ITEM_PROPERTY, Results, json_lines, junit_properties
from .table import compact_report

__all__ = ["CHECK_PROPERTY", "ITEM_PROPERTY", "ReportPlugin", "Results", "banner", "compact_report", "json_lines",
           "junit_properties"]
