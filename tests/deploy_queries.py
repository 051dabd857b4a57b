"""The PromQL of deploy/: every expression of the Grafana dashboard and of the Prometheus rules,
parsed by a real PromQL parser (promql-parser, a port of Prometheus's own), and the metric
selectors in them with the functions they sit in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "kpd.json"
RULES = DEPLOY / "prometheus" / "rules" / "kpd-alerts.yml"
# Grafana fills these in before Prometheus sees the query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
# Functions whose argument must be a counter (or a histogram's _bucket/_sum/_count series).
COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase", "resets"})


@dataclass(frozen=True)
class Selector:
    name: str
    functions: tuple[str, ...]  # the calls around it, outermost first
    where: str


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def dashboard_exprs() -> dict[str, str]:
    """{"panel <title> <refId>": expr} for every query of every panel."""
    return {
        f"panel {panel['title']!r} {target['refId']}": target["expr"]
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    }


def rule_exprs() -> dict[str, str]:
    return {f"alert {rule['alert']}": rule["expr"] for rule in rules()}


def parse(expr: str) -> promql_parser.Expr:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return promql_parser.parse(expr)


def walk(expr: str) -> list[tuple[Any, tuple[str, ...]]]:
    """Every node of the parsed expression with the function calls around it."""
    nodes: list[tuple[Any, tuple[str, ...]]] = []
    calls: list[str] = []

    def enter(node: Any) -> None:
        nodes.append((node, tuple(calls)))
        if isinstance(node, promql_parser.Call):
            calls.append(node.func.name)

    def leave(node: Any) -> None:
        if isinstance(node, promql_parser.Call):
            calls.pop()

    promql_parser.walk(parse(expr), enter, leave)
    return nodes


def selectors(where: str, expr: str) -> list[Selector]:
    found = []
    for node, calls in walk(expr):
        if isinstance(node, promql_parser.VectorSelector):
            names = [m.value for m in node.matchers.matchers if m.name == "__name__"]
            found.append(Selector(node.name or names[0], calls, where))
    return found


def all_selectors() -> list[Selector]:
    exprs = {**dashboard_exprs(), **rule_exprs()}
    return [selector for where, expr in exprs.items() for selector in selectors(where, expr)]
