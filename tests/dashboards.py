"""The Grafana dashboard of the ``metrics`` Compose profile, and the metric names in play: those
its PromQL reads and those a scrape of Boxcar shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "deploy" / "grafana" / "boxcar-dashboard.json"
SCHEMA = REPO / "tests" / "grafana" / "dashboard.schema.json"

#: PromQL's keywords and modifiers: words of an expression that are not metric names
PROMQL_WORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "and",
        "or",
        "unless",
        "inf",
        "nan",
    }
)


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too (rows themselves excluded)."""
    out = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            out += panel.get("panels", [])
        else:
            out.append(panel)
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names and values,
    ranges and groupings left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors, $__rate_interval
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):  # not the unit of 5m, 1e3
        word = match.group()
        if text[match.end() :].lstrip().startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function, or a keyword
        names.add(word)
    return names


def dashboard_metric_names(dashboard: dict) -> set[str]:
    """Every metric name the dashboard's queries read."""
    return {name for panel in panels(dashboard) for target in panel["targets"] for name in metric_names(target["expr"])}


def exported_names(exposition: str) -> set[str]:
    """The series names a scrape offers (a counter ``x``: ``x_total``; a histogram: ``x_bucket``,
    ``x_sum``, ``x_count``), those of families with no sample yet too."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names
