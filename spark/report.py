"""Human-readable output of the audit: `report.html` plus the PNG plots it references.

The page is self-contained apart from its PNGs, which sit next to it and are referenced by relative
`<img src=...>`, so the output folder can be copied, zipped or served as it is.
"""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or in spark-submit drivers

import matplotlib.pyplot as plt

HISTOGRAM_PNG = "lateness_histogram.png"
OVER_TIME_PNG = "lateness_over_time.png"
_EVENT_COLUMNS = ("scheduled", "delivered", "cancelled", "retried", "dead-lettered", "invalid")


_MEASURES = (
    ("lateness_ms", "end to end (delivered - due)", ""),
    ("dispatch_lateness_ms", "dispatch, kpd's own (delivered - max(due, enqueued))", "dispatch_"),
)


def write_plots(
    out: Path, summary: dict[str, Any], histograms: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """Write both plots, each with a panel per lateness measure; return their file names.

    An empty panel says "no deliveries" rather than missing.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (measure, label, _) in zip(axes, _MEASURES, strict=True):
        bins = histograms.get(measure, [])
        if bins:
            ax.bar(
                [b["from_ms"] for b in bins],
                [b["count"] for b in bins],
                width=[b["to_ms"] - b["from_ms"] for b in bins],
                align="edge",
                color="#4878a8",
            )
            ax.set_yscale("log")  # a long tail stays visible next to the bulk
            ax.axvline(0, color="#c03030", linewidth=1, label="due time")
            ax.legend()
        else:
            _no_deliveries(ax)
        ax.set_xlabel("ms; last bar includes everything past p99.9")
        ax.set_ylabel("deliveries")
        ax.set_title(f"Lateness, {label}", fontsize=10)
    _save(fig, out / HISTOGRAM_PNG)

    fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    minutes = summary["lateness_per_minute"]
    xs = [dt.datetime.fromtimestamp(m["minute_ms"] / 1000, dt.UTC) for m in minutes]
    for ax, (_, label, prefix) in zip(axes, _MEASURES, strict=True):
        if minutes:
            for key in ("p50", "p99", "max"):
                ax.plot(xs, [m[f"{prefix}{key}_ms"] for m in minutes], marker=".", label=key)
            ax.legend()
        else:
            _no_deliveries(ax)
        ax.set_ylabel("ms")
        ax.set_title(f"Lateness per minute, {label}", fontsize=10)
    axes[-1].set_xlabel("minute (UTC)")
    if minutes:
        fig.autofmt_xdate()
    _save(fig, out / OVER_TIME_PNG)
    return [HISTOGRAM_PNG, OVER_TIME_PNG]


def _no_deliveries(ax: Any) -> None:
    ax.text(0.5, 0.5, "no deliveries in the window", ha="center", transform=ax.transAxes)


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _stats_table(title: str, rows: dict[str, dict[str, Any]]) -> str:
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p>none</p>"
    lat = ("count", "p50", "p95", "p99", "p999", "max")
    anomalies = ("early", "late", "late_end_to_end", "missing", "duplicates", "pending")
    measures = (("lateness_ms", "lateness"), ("dispatch_lateness_ms", "dispatch"))
    head = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in (
            "name",
            *_EVENT_COLUMNS,
            *(f"{title} {k}" for _, title in measures for k in lat),
            *anomalies,
        )
    )
    body = []
    for name, s in rows.items():
        bad = s["early"] or s["missing"] or s["duplicates"]
        cells = [
            f"<td>{html.escape(name)}</td>",
            *(f"<td>{_fmt(s['events'][e])}</td>" for e in _EVENT_COLUMNS),
            *(f"<td>{_fmt(s[m][k])}</td>" for m, _ in measures for k in lat),
            *(f"<td>{_fmt(s[k])}</td>" for k in anomalies),
        ]
        body.append(f"<tr{' class=bad' if bad else ''}>{''.join(cells)}</tr>")
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{''.join(body)}</table>"


def _list(title: str, table: Any, total: int) -> str:
    """First rows of an anomaly table (the Parquet file holds up to the list limit)."""
    if total == 0:
        return ""
    shown = table.slice(0, 50).to_pylist()
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.column_names)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_fmt(r[c])}</td>" for c in table.column_names) + "</tr>"
        for r in shown
    )
    note = f"{total:,} in total; first {len(shown)} shown, more in the Parquet file"
    return f"<h3>{html.escape(title)}</h3><p>{note}</p><table><tr>{head}</tr>{rows}</table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
tr.bad{background:#fde2e2} .ok{color:#207020} .fail{color:#b02020}
"""


def write_html(
    out: Path, summary: dict[str, Any], tables: dict[str, Any], plots: list[str]
) -> Path:
    w = summary["window"]
    verdict = summary["verdict"]
    status = (
        "<p class=ok><b>PASS</b>: no anomaly above its threshold</p>"
        if not verdict["violations"]
        else "<p class=fail><b>FAIL</b>: " + html.escape(", ".join(verdict["violations"])) + "</p>"
    )
    anomalies = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{_fmt(v)}</td>"
        f"<td>{_fmt(verdict['thresholds'].get(k))}</td></tr>"
        for k, v in summary["anomalies"].items()
    )
    overall = {"all targets": summary["overall"]}
    parts = [
        "<!doctype html><html><head><meta charset=utf-8><title>kpd delivery audit</title>",
        f"<style>{_CSS}</style></head><body><h1>kpd delivery audit</h1>",
        f"<p>Source: {html.escape(summary['source']['description'])}<br>",
        f"Window: {_when(w['since_ms'] or w['first_at_ms'])} → {_when(w['end_ms'])} "
        f"(end from {html.escape(w['end_from'])}); records {_fmt(summary['records']['total'])}, "
        f"malformed {_fmt(summary['records']['malformed'])}<br>",
        f"Late threshold {_fmt(summary['params']['late_threshold_ms'])} ms on dispatch "
        f"lateness, grace {_fmt(summary['params']['grace_ms'])} ms; lateness percentiles: "
        f"{html.escape(summary['lateness_method'])}<br>",
        "Lateness = delivered - due, end to end: a schedule that reached kpd after its due time "
        "counts as late by however long it was overdue. Dispatch lateness = delivered - "
        "max(due, enqueued): kpd's own, the one gated by the late threshold.</p>",
        status,
        "<h2>Anomalies</h2><table><tr><th>kind</th><th>count</th><th>max allowed</th></tr>",
        anomalies,
        "</table>",
        *(f'<p><img src="{html.escape(p)}" alt="{html.escape(p)}"></p>' for p in plots),
        _stats_table("Overall", overall),
        _stats_table("Per target topic", summary["by_target"]),
        _stats_table("Per pop group", summary["by_group"]),
        "<h2>Anomaly lists</h2>",
        *(
            _list(name, tables[name], summary["anomalies"][name])
            for name in ("early", "missing", "duplicates", "late", "malformed")
        ),
        "</body></html>",
    ]
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
