"""`kpd_core.DeliveryRenderer`: a pop's answers and DELIVERED events, rendered per lane batch,
are the JSON the HTTP API and the delivery log promise, for any record Kafka can hand over."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kpd_core import DeliveryRenderer

from foundation.delivery_log import Event, log_record
from revive.copies import DELIVERY_COUNT, KPD_HEADERS, ORIGIN_TOPIC, Origin, Provenance
from revive.source_record import SourceRecord

RENDERER = DeliveryRenderer("node-a", KPD_HEADERS)
# Text that JSON must escape, and bytes that are not UTF-8.
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
BYTES = st.binary(max_size=60) | TEXT.map(str.encode)
HEADER_NAMES = st.sampled_from(["trace", 'a"b', "é", "x\n", DELIVERY_COUNT, ORIGIN_TOPIC]) | TEXT


def _text(data: bytes | None) -> str | None:
    try:
        return None if data is None else data.decode()
    except UnicodeDecodeError:
        return None


def expected_message(record: SourceRecord, origin: Origin, receipt: str, count: int) -> dict:
    """The pop answer's fields (docs/reference.md): key and value as text when UTF-8, a value that
    is not as `value_b64`, headers other than kpd's own, a repeated name's last value."""
    headers: dict[str, str] = {}
    for name, value in record.headers:
        if name not in KPD_HEADERS:
            headers[name] = (value or b"").decode("utf-8", "replace")
    body: dict[str, Any] = {
        "receipt": receipt,
        "topic": origin.topic,
        "partition": origin.partition,
        "offset": origin.offset,
        "key": _text(record.key),
        "headers": headers,
        "timestamp_ms": record.timestamp_ms,
        "delivery_count": count,
        "invisible_until_ms": 9_000,
    }
    if record.value is not None and _text(record.value) is None:
        body["value_b64"] = base64.b64encode(record.value).decode()
    else:
        body["value"] = _text(record.value)
    return body


records = st.builds(
    SourceRecord,
    topic=st.just("kpd.retry.g"),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | BYTES,
    value=st.none() | BYTES,
    headers=st.lists(st.tuples(HEADER_NAMES, st.none() | BYTES), max_size=6).map(tuple),
    timestamp_ms=st.integers(-1, 2**53),
)
origins = st.builds(
    Origin,
    topic=st.text(alphabet="abcXYZ019._-", min_size=1, max_size=249),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
)


@given(
    messages=st.lists(
        st.tuples(records, origins, st.integers(1, 0xFFFF), TEXT), min_size=1, max_size=8
    ),
    group=TEXT,
)
def test_answers_and_events_are_the_promised_json(messages, group):
    batch = [(record, Provenance(origin, count - 1)) for record, origin, count, _ in messages]
    counts = [count for _, _, count, _ in messages]
    receipts = [receipt for *_, receipt in messages]
    answers, events = RENDERER.render(group, batch, counts, receipts, 5_000, 9_000)
    assert [orjson.loads(answer) for answer in answers] == [
        expected_message(record, origin, receipt, count)
        for record, origin, count, receipt in messages
    ]
    assert [record_id for record_id, _ in events] == [
        f"{origin.topic}:{origin.partition}:{origin.offset}" for _, origin, _, _ in messages
    ]
    # The one definition of an event's fields: foundation.delivery_log, as the other events use.
    assert [orjson.loads(value) for _, value in events] == [
        orjson.loads(
            log_record(
                Event.DELIVERED,
                f"{origin.topic}:{origin.partition}:{origin.offset}",
                origin.topic,
                due_ms=None,
                at_ms=5_000,
                enqueued_ms=record.timestamp_ms,
                node="node-a",
                delivery_count=count,
                partition=origin.partition,
                offset=origin.offset,
                group=group,
            )
        )
        for record, origin, count, _ in messages
    ]


def test_a_large_binary_value_is_base64_and_kpd_headers_stay_hidden():
    value = bytes(range(256)) * 4096  # 1 MiB, not UTF-8
    record = SourceRecord("t", 0, 7, None, value, (("kpd-origin-topic", b"x"), ("k", None)), 1)
    [answer], _ = RENDERER.render(
        "g", [(record, Provenance(Origin.here(record), 0))], [1], ["r"], 1, 2
    )
    decoded = orjson.loads(answer)
    assert base64.b64decode(decoded["value_b64"]) == value
    assert "value" not in decoded
    assert decoded["headers"] == {"k": ""}


@pytest.mark.parametrize(("counts", "receipts"), [([1, 1], ["r"]), ([1], ["r", "s"]), ([], ["r"])])
def test_a_batch_needs_a_count_and_a_receipt_per_message(counts, receipts):
    record = SourceRecord("t", 0, 7, None, b"v", (), 1)
    with pytest.raises(ValueError, match="a count and a receipt"):
        RENDERER.render("g", [(record, Provenance(Origin.here(record), 0))], counts, receipts, 1, 2)
