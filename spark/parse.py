"""Parse and validate delivery-log records into typed event columns (one row per record).

Only built-in Spark SQL functions are used (no Python UDFs), so executors never need this code:
`spark-submit` ships nothing but the driver script, and the JVM does all the heavy work.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

EVENTS = ("scheduled", "delivered", "cancelled", "retried", "dead-lettered", "invalid")
# Integer kinds Spark's VARIANT reports for JSON integers (it picks the narrowest that fits).
_INT_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_RAW_CHARS = 2000  # enough of a bad record to see what went wrong, bounded for huge values

# (name, kind, required). Nullable fields may also be absent: writers that drop nulls stay valid.
_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("event", "string", True),
    ("id", "string", True),
    ("target", "string", True),
    ("due_ms", "long", False),
    ("at_ms", "long", True),
    ("enqueued_ms", "long", False),
    ("delivery_count", "long", True),
    ("node", "string", True),
    ("group", "string", False),
    ("partition", "long", False),
    ("offset", "long", False),
    ("reason", "string", False),
)
# Internal column names: `group` and `offset` are SQL keywords, renamed once here.
INTERNAL_NAMES = {"group": "grp", "offset": "src_offset", "partition": "src_partition"}
EVENT_COLUMNS = [INTERNAL_NAMES.get(name, name) for name, _, _ in _FIELDS]


def _col_name(name: str) -> str:
    return INTERNAL_NAMES.get(name, name)


# --------------------------------------------------------------------------- parsing


def parse_json_records(raw: DataFrame) -> DataFrame:
    """`raw(value string, source string)` → event columns + `malformed_reason`, `source`, `raw`.

    JSON goes through VARIANT so that a wrong type (`"at_ms": "12"`) is told apart from a missing
    field; `from_json` would silently turn both into null (or cast strings to numbers).
    """
    v = F.expr("try_parse_json(value)")
    parsed = raw.select(
        F.col("value"), F.col("source"), v.alias("v"), F.schema_of_variant(v).alias("v_kind")
    )
    kinds = {
        name: F.schema_of_variant(F.expr(f"variant_get(v, '$.{name}')")) for name, _, _ in _FIELDS
    }
    checks: list[tuple[Column, str]] = [
        (F.col("value").isNull(), "empty_value"),
        (F.col("v").isNull(), "bad_json"),
        (~F.col("v_kind").startswith("OBJECT"), "not_an_object"),
    ]
    values: dict[str, Column] = {}
    for name, kind, required in _FIELDS:
        k = kinds[name]
        absent = k.isNull() | (k == "VOID")
        wrong = ~k.isin("STRING") if kind == "string" else ~k.isin(*_INT_KINDS)
        if required:
            checks.append((absent, f"missing_field:{name}"))
        checks.append((~absent & wrong, f"bad_type:{name}"))
        sql_type = "string" if kind == "string" else "bigint"
        values[name] = F.expr(f"try_variant_get(v, '$.{name}', '{sql_type}')")
    checks.append((~values["event"].isin(*EVENTS), "unknown_event"))
    checks.append((_needs_due(values), "missing_due_ms"))
    return parsed.select(*_shape(values, _first_failure(checks), F.col("source"), F.col("value")))


def normalize_typed(df: DataFrame, source: Column) -> DataFrame:
    """Typed tables (Parquet exports with one column per field) → the same shape as JSON input."""
    present = {c.lower(): c for c in df.columns}
    values: dict[str, Column] = {}
    checks: list[tuple[Column, str]] = []
    for name, kind, required in _FIELDS:
        sql_type = "string" if kind == "string" else "bigint"
        if name in present:
            # try_cast: a column of the wrong type yields nulls, reported below, not a crash.
            values[name] = F.col(f"`{present[name]}`").try_cast(sql_type)
        else:
            values[name] = F.lit(None).cast(sql_type)
        if required:
            checks.append((values[name].isNull(), f"missing_field:{name}"))
    checks.append((~values["event"].isin(*EVENTS), "unknown_event"))
    checks.append((_needs_due(values), "missing_due_ms"))
    raw = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
    return df.select(*_shape(values, _first_failure(checks), source, raw))


def _shape(values: dict[str, Column], reason: Column, source: Column, raw: Column) -> list[Column]:
    """Final columns; `source` and `raw` only for malformed records (kept small in the cache)."""
    return [
        *[values[name].alias(_col_name(name)) for name, _, _ in _FIELDS],
        reason.alias("malformed_reason"),
        F.when(reason.isNotNull(), source).alias("source"),
        F.when(reason.isNotNull(), F.substring(raw, 1, _RAW_CHARS)).alias("raw"),
    ]


def _needs_due(values: dict[str, Column]) -> Column:
    """A schedule, or a delay delivery, without a due time cannot be reconciled.

    A `delivered` event with a `group` is a pop delivery: a consumer asked for it, nothing was
    due, so it has no due time (and no lateness).
    """
    is_schedule = values["event"] == "scheduled"
    is_delay_delivery = (values["event"] == "delivered") & values["group"].isNull()
    return (is_schedule | is_delay_delivery) & values["due_ms"].isNull()


def _first_failure(checks: Iterable[tuple[Column, str]]) -> Column:
    expr: Column | None = None
    for cond, reason in checks:
        # coalesce: a null condition (e.g. comparing a null) never marks a record by itself.
        cond = F.coalesce(cond, F.lit(False))
        expr = F.when(cond, F.lit(reason)) if expr is None else expr.when(cond, F.lit(reason))
    assert expr is not None
    return expr.otherwise(F.lit(None).cast("string"))
