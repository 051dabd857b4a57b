"""The delay service end to end: a real `kpd run`, real Kafka, real RocksDB, over Kafka and HTTP.

Deliveries are read with a `read_committed` consumer; nothing waits on a sleep: reads run until a
count or a sentinel record arrives (with a deadline), plus a short settle read where "nothing
more" is the claim.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import httpx
from confluent_kafka import Message
from kafka_helpers import (
    TopicReader,
    assert_never_early,
    buffer_record,
    delivered_ids,
    header_dict,
    kpd_id,
    log_events,
    make_producer,
    metric_total,
    metric_values,
    now_ms,
    produce_all,
    wait_delivering,
    wait_for,
)

from foundation.shards import ShardMap

YEAR_MS = 365 * 24 * 3600 * 1000
PROBLEM = "application/problem+json"


def _schedule_http(http, target: str, **message):
    response = http.post(f"/v1/topics/{target}/messages", json={"messages": [message]})
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    return result


def _state(http, schedule_id: str) -> str | None:
    response = http.get(f"/v1/schedules/{schedule_id}")
    return response.json()["state"] if response.status_code == 200 else None


def _pending(http: httpx.Client) -> float | None:
    """Schedules pending over the shards this sidecar leads."""
    return metric_total(metric_values(http), "kpd_schedules_pending")


def test_due_order_never_early_exactly_once_and_payload_unchanged(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    # LogAppendTime: the delivered record's timestamp is the broker's clock, not kpd's.
    target = new_topic("order", config={"message.timestamp.type": "LogAppendTime"})
    past_target = new_topic("past")
    producer = make_producer(kafka_bootstrap)
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))

    # Past due: deliver-at 0, deliver-at a minute ago, delay 0 -> delivered at once.
    sent_at = now_ms()
    produce_all(
        producer,
        buffer,
        [
            buffer_record(past_target, value=b"at-zero", deliver_at=0, schedule_id="past-0"),
            buffer_record(
                past_target, value=b"minute-ago", deliver_at=sent_at - 60_000, schedule_id="past-1"
            ),
            buffer_record(past_target, value=b"delay-zero", delay_ms=0, schedule_id="past-2"),
        ],
        timestamp_ms=sent_at,
    )

    rng = random.Random(1234)
    t0 = now_ms()
    expected = {}  # n -> (key, value, user headers, due, caller id or None)
    records = []
    for n in range(300):
        delay = rng.randint(1500, 4000)
        key = None if n % 7 == 0 else f"key-{n}".encode()
        value = None if n == 5 else f"value-{n}".encode() + bytes([0, 255])
        user = [
            ("n", str(n).encode()),
            ("bin", bytes([0, 128, 255, n % 256])),
            ("dup", b"first"),
            ("dup", b"second"),
            ("empty", b""),
        ]
        sid = None if n % 10 == 0 else f"ord-{n}"  # every tenth gets the default id
        if n % 2:
            record = buffer_record(
                target, value=value, key=key, deliver_at=t0 + delay, schedule_id=sid, headers=user
            )
        else:
            record = buffer_record(
                target, value=value, key=key, delay_ms=delay, schedule_id=sid, headers=user
            )
        expected[n] = (key, value, user, t0 + delay, sid)
        records.append(record)
    rng.shuffle(records)
    produce_all(producer, buffer, records, timestamp_ms=t0)  # delay-ms counts from t0

    with TopicReader(kafka_bootstrap, past_target) as past:
        delivered = past.read_count(3, 15)
        assert {m.value() for m in delivered} == {b"at-zero", b"minute-ago", b"delay-zero"}
        for message in delivered:
            waited = message.timestamp()[1] - sent_at
            assert 0 <= waited < 1000, f"past-due record delivered {waited} ms after it was sent"
        assert_never_early(delivered)

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_count(300, 30)
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert len(messages) == 300, f"{len(messages)} delivered for 300 scheduled"
    ids = delivered_ids(messages)
    assert len(set(ids)) == 300
    assert_never_early(messages)
    for message in messages:
        assert message.timestamp()[0] == 2  # TIMESTAMP_LOG_APPEND_TIME

    # Due order holds within a shard (one writer in due order); shards commit independently, so
    # across shards the order holds only to within their lateness.
    shard_map = ShardMap(int(sidecar.env["KPD_SHARDS"]), int(sidecar.env["KPD_SHARDS"]))
    dues = [int(header_dict(m)["kpd-deliver-at"]) for m in messages]  # in offset order
    by_shard: dict[int, list[int]] = {}
    for schedule_id, due in zip(ids, dues, strict=True):
        by_shard.setdefault(shard_map.of_key(schedule_id), []).append(due)
    assert len(by_shard) == shard_map.shards  # the test really spans shards
    out_of_order = [
        (a, b)
        for shard_dues in by_shard.values()
        for a, b in itertools.pairwise(shard_dues)
        if b < a
    ]
    assert not out_of_order, f"delivered out of due order within a shard: {out_of_order[:5]}"
    assert len(set(dues)) > 200  # the due times really were spread out

    seen = set()
    for message in messages:
        headers = message.headers()
        n = int(header_dict(message)["n"])
        seen.add(n)
        key, value, user, due, sid = expected[n]
        assert message.key() == key
        assert message.value() == value
        assert headers[: len(user)] == user, "user headers changed"
        assert [name for name, _ in headers[len(user) :]] == ["kpd-id", "kpd-deliver-at"]
        assert header_dict(message)["kpd-deliver-at"] == str(due).encode()
        if sid is None:
            assert re.fullmatch(r"kpd:\d+-\d+-\d+", kpd_id(message)), kpd_id(message)
        else:
            assert kpd_id(message) == sid
    assert seen == set(range(300))


def test_null_header_values_stay_null(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a").start()
    target = new_topic("nullhdr")
    produce_all(
        make_producer(kafka_bootstrap),
        sidecar.env["KPD_BUFFER_TOPIC"],
        [buffer_record(target, value=b"v", delay_ms=0, headers=[("nothing", None)])],
    )
    with TopicReader(kafka_bootstrap, target) as reader:
        (message,) = reader.read_count(1, 15)
    assert message.headers()[0] == ("nothing", None)


def test_cancel_before_due_by_header_and_by_http(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("cancel")
    producer = make_producer(kafka_bootstrap)
    t0 = now_ms()
    produce_all(
        producer,
        buffer,
        [
            buffer_record(target, value=b"cancel me", deliver_at=t0 + 2000, schedule_id="k-cancel"),
            buffer_record(target, value=b"keep me", deliver_at=t0 + 2000, schedule_id="keep"),
        ],
    )
    produce_all(producer, buffer, [(None, None, [("kpd-cancel", b"k-cancel")])])
    with sidecar.client() as http:
        result = _schedule_http(http, target, value="cancel me too", delay_ms=2000, id="h-cancel")
        assert result["status"] == "scheduled" and result["id"] == "h-cancel"
        assert _state(http, "h-cancel") == "scheduled"
        response = http.delete("/v1/schedules/h-cancel")
        assert response.status_code == 204, response.text
        assert _state(http, "h-cancel") == "cancelled"
        assert http.delete("/v1/schedules/h-cancel").status_code == 204  # idempotent
        wait_for(lambda: _state(http, "k-cancel") == "cancelled", 10, "k-cancel cancelled")

        # The sentinel is due after the cancelled ones; dispatch is in due order, so once it
        # arrives the cancelled ones would have arrived too.
        produce_all(
            producer,
            buffer,
            [buffer_record(target, value=b"sentinel", deliver_at=t0 + 2500, schedule_id="sent")],
        )
        with TopicReader(kafka_bootstrap, target) as reader:
            reader.read_until(lambda m: "sent" in delivered_ids(m), 20, "the sentinel")
            messages = reader.read_for(0.5)
        assert now_ms() > t0 + 2500
        assert sorted(delivered_ids(messages)) == ["keep", "sent"]
        assert_never_early(messages)
        assert _state(http, "k-cancel") == "cancelled"
        assert _state(http, "h-cancel") == "cancelled"
        assert _state(http, "keep") == "delivered"

        # After delivery: 409 already_delivered, and a Kafka-native cancel changes nothing.
        response = http.delete("/v1/schedules/keep")
        assert response.status_code == 409
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["code"] == "already_delivered"
        produce_all(producer, buffer, [(None, None, [("kpd-cancel", b"keep")])])

        missing = http.delete("/v1/schedules/no-such-schedule")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == PROBLEM
        assert missing.json()["code"] == "schedule_not_found"
        assert http.get("/v1/schedules/no-such-schedule").json()["code"] == "schedule_not_found"

        # The late cancel is processed (the next schedule behind it proves it) and changed nothing.
        _schedule_http(http, target, value="after", delay_ms=0, id="after-late-cancel")
        wait_for(lambda: _state(http, "after-late-cancel") == "delivered", 10, "delivered")
        assert _state(http, "keep") == "delivered"


def test_duplicate_caller_id_is_delivered_once_with_the_first_value(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("dup")
    producer = make_producer(kafka_bootstrap)
    t0 = now_ms()
    produce_all(
        producer,
        buffer,
        [
            # Keyed by id (docs/architecture.md): one buffer partition, so "first" is first.
            buffer_record(
                target, value=b"first", key=b"dup-k", deliver_at=t0 + 1500, schedule_id="dup-k"
            ),
            buffer_record(
                target, value=b"second", key=b"dup-k", deliver_at=t0 + 1000, schedule_id="dup-k"
            ),
        ],
    )
    with sidecar.client() as http:
        first = _schedule_http(http, target, value="first", delay_ms=1500, id="dup-h")
        second = _schedule_http(http, target, value="second", delay_ms=500, id="dup-h")
        assert second["status"] == "scheduled"
        assert second["deliver_at_ms"] == first["deliver_at_ms"]
        batch = http.post(
            f"/v1/topics/{target}/messages",
            json={
                "messages": [
                    {"value": "first", "delay_ms": 1500, "id": "dup-b"},
                    {"value": "second", "delay_ms": 1500, "id": "dup-b"},
                ]
            },
        )
        assert [r["status"] for r in batch.json()["results"]] == ["scheduled", "scheduled"]

        with TopicReader(kafka_bootstrap, target) as reader:
            reader.read_until(
                lambda m: {"dup-k", "dup-h", "dup-b"} <= set(delivered_ids(m)), 20, "3 ids"
            )
            # The same id again after delivery schedules nothing; the sentinel behind it (same
            # partition, due now) proves the leader has read past it.
            produce_all(
                producer,
                buffer,
                [
                    buffer_record(target, value=b"third", delay_ms=0, schedule_id="dup-k"),
                    buffer_record(target, value=b"s", delay_ms=0, schedule_id="dup-sentinel"),
                ],
            )
            reader.read_until(lambda m: "dup-sentinel" in delivered_ids(m), 20, "sentinel")
            messages = reader.read_for(0.5)
        by_id = {kpd_id(m): m for m in messages}
        assert sorted(delivered_ids(messages)) == ["dup-b", "dup-h", "dup-k", "dup-sentinel"]
        assert by_id["dup-k"].value() == b"first"
        assert header_dict(by_id["dup-k"])["kpd-deliver-at"] == str(t0 + 1500).encode()
        assert by_id["dup-h"].value() == b"first"
        assert by_id["dup-b"].value() == b"first"
        assert_never_early(messages)


def test_one_year_delay_is_stored_counted_and_cancellable(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    target = new_topic("year")
    with sidecar.client() as http:
        before = now_ms()
        result = _schedule_http(http, target, value="next year", delay_ms=YEAR_MS, id="year-h")
        after = now_ms()
        assert result["status"] == "scheduled"
        assert before + YEAR_MS <= result["deliver_at_ms"] <= after + YEAR_MS
        due_k = now_ms() + YEAR_MS
        produce_all(
            make_producer(kafka_bootstrap),
            sidecar.env["KPD_BUFFER_TOPIC"],
            [buffer_record(target, value=b"k", deliver_at=due_k, schedule_id="year-k")],
        )
        wait_for(lambda: _state(http, "year-k") == "scheduled", 10, "year-k scheduled")
        body = http.get("/v1/schedules/year-h").json()
        assert body == {
            "id": "year-h",
            "state": "scheduled",
            "target": target,
            "deliver_at_ms": result["deliver_at_ms"],
        }
        assert http.get("/v1/schedules/year-k").json()["deliver_at_ms"] == due_k
        wait_for(
            lambda: _pending(http) == 2,
            10,
            "pending == 2",
        )

        assert http.delete("/v1/schedules/year-h").status_code == 204
        assert _state(http, "year-h") == "cancelled"
        assert _state(http, "year-k") == "scheduled"
        wait_for(
            lambda: _pending(http) == 1,
            10,
            "pending == 1",
        )
        assert http.delete("/v1/schedules/year-k").status_code == 204
        assert _state(http, "year-k") == "cancelled"
        wait_for(
            lambda: _pending(http) == 0,
            10,
            "pending == 0",
        )
        assert metric_values(http)["kpd_schedules_cancelled_total"] == 2


def test_delivery_log_and_metrics(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("node-log").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("log")
    producer = make_producer(kafka_bootstrap)
    with sidecar.client() as http:
        # Ready means the shards have a leader; their gauges appear once the delay roles start.
        gauges = ("kpd_schedules_pending", "kpd_due_backlog")
        wait_for(
            lambda: all(metric_total(metric_values(http), g) is not None for g in gauges),
            30,
            "the delay roles' gauges",
        )
        start = metric_values(http)
        for name in (
            "kpd_schedules_delivered_total",
            "kpd_schedules_scheduled_total",
            "kpd_schedules_cancelled_total",
            "kpd_buffer_invalid_total",
            "kpd_delivery_lateness_seconds_count",
        ):
            assert start.get(name) == 0, (name, start.get(name))
        for name in gauges:  # per shard led here
            assert metric_total(start, name) == 0, (name, metric_total(start, name))
        assert "kpd_delivery_lateness_seconds_bucket{le=0.005}" in start

        enqueued = now_ms()
        produce_all(
            producer,
            buffer,
            [buffer_record(target, value=b"c", delay_ms=60_000, schedule_id="log-c")],
            timestamp_ms=enqueued,
        )
        wait_for(
            lambda: _pending(http) == 1,
            10,
            "pending == 1",
        )
        produce_all(
            producer,
            buffer,
            [
                (None, None, [("kpd-cancel", b"log-c")]),
                buffer_record(target, value=b"d", delay_ms=200, schedule_id="log-d"),
                (b"bad", b"no target", [("kpd-delay-ms", b"5")]),
            ],
            timestamp_ms=enqueued,
        )
        with TopicReader(kafka_bootstrap, target) as reader:
            (delivered,) = reader.read_count(1, 15)
        assert kpd_id(delivered) == "log-d"

        with TopicReader(kafka_bootstrap, sidecar.env["KPD_DELIVERY_LOG_TOPIC"]) as log_reader:
            log_reader.read_count(5, 15)
            events = log_events(log_reader.read_for(0.3))
        fields = {"event", "id", "target", "due_ms", "at_ms", "enqueued_ms"}
        fields |= {"delivery_count", "node"}
        for event in events:
            assert fields <= set(event), event
            assert event["node"] == "node-log"
        by_kind = {(e["event"], e["id"]) for e in events}
        invalid_id = next(e["id"] for e in events if e["event"] == "invalid")
        assert by_kind == {
            ("scheduled", "log-c"),
            ("cancelled", "log-c"),
            ("scheduled", "log-d"),
            ("delivered", "log-d"),
            ("invalid", invalid_id),
        }, by_kind
        events_by = {(e["event"], e["id"]): e for e in events}
        scheduled = events_by[("scheduled", "log-d")]
        assert scheduled["target"] == target
        assert scheduled["due_ms"] == enqueued + 200
        assert scheduled["enqueued_ms"] == enqueued
        assert scheduled["at_ms"] >= enqueued
        done = events_by[("delivered", "log-d")]
        assert done["due_ms"] == enqueued + 200
        assert done["at_ms"] >= done["due_ms"]
        assert done["at_ms"] == delivered.timestamp()[1]
        assert done["delivery_count"] == 1
        assert done["enqueued_ms"] == enqueued
        cancelled = events_by[("cancelled", "log-c")]
        assert cancelled["due_ms"] == enqueued + 60_000
        assert cancelled["target"] == target
        assert cancelled["at_ms"] < cancelled["due_ms"]
        bad = events_by[("invalid", invalid_id)]
        assert "missing kpd-target" in bad["reason"]
        assert bad["enqueued_ms"] == enqueued

        end = metric_values(http)
        assert end["kpd_schedules_delivered_total"] == 1
        assert end["kpd_schedules_scheduled_total"] == 2
        assert end["kpd_schedules_cancelled_total"] == 1
        assert end["kpd_buffer_invalid_total"] == 1
        assert end["kpd_delivery_lateness_seconds_count"] == 1
        # The log entry travels in the delivery's transaction, so it says when the record was
        # sent; the metric counts until that transaction committed (when consumers see it).
        sent_late_s = (done["at_ms"] - done["due_ms"]) / 1000
        commit_s = end["kpd_delivery_lateness_seconds_sum"] - sent_late_s
        assert 0 <= commit_s < 2, f"lateness metric {commit_s:.3f} s off the logged send"
        assert end["kpd_delivery_lateness_seconds_bucket{le=+Inf}"] == 1
        assert metric_total(end, "kpd_schedules_pending") == 0
        assert metric_total(end, "kpd_due_backlog") == 0
        assert end["kpd_leader"] == 1
        # What the steps of this test waited on the broker, by phase: their records, the buffer
        # offsets of the ingest steps, their commits.
        for phase in ("write", "offsets", "commit"):
            series = f"kpd_transaction_seconds_count{{phase={phase},role=delay}}"
            assert end[series] > start.get(series, 0), series


def test_due_schedules_are_delivered_from_memory(sidecar_factory, new_topic, kafka_bootstrap):
    """A schedule due inside the wheel's window is held in memory, from the step that wrote it or
    loaded as the window slides to it, so its delivery reads no RocksDB: only ingest's check of a
    new id does (`kpd_schedule_index_reads_total`). Once delivered, nothing stays held."""
    sidecar = sidecar_factory("node-held").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("held")
    producer = make_producer(kafka_bootstrap)
    n = 30
    with sidecar.client() as http:
        wait_delivering(http, target)
        before = metric_values(http)["kpd_schedule_index_reads_total"]
        enqueued = now_ms()
        soon = [
            buffer_record(target, value=b"s", delay_ms=1_500, schedule_id=f"soon-{i}")
            for i in range(n)
        ]
        # Beyond the 10 s window when written: loaded from RocksDB by the slide, ahead of time.
        later = [
            buffer_record(target, value=b"l", delay_ms=11_000, schedule_id=f"later-{i}")
            for i in range(n)
        ]
        produce_all(producer, buffer, soon + later, timestamp_ms=enqueued)
        with TopicReader(kafka_bootstrap, target) as reader:

            def all_of(prefix: str) -> Callable[[list[Message]], bool]:
                return lambda seen: sum(kpd_id(m).startswith(prefix) for m in seen) == n

            def held() -> float | None:
                return metric_total(metric_values(http), "kpd_window_held_bytes")

            reader.read_until(all_of("soon-"), 15, "the schedules due soon")
            wait_for(lambda: (held() or 0) > 0, 11, "the later schedules held as the window slid")
            reader.read_until(all_of("later-"), 20, "the schedules due later")
            delivered = [m for m in reader.read_for(0.3) if not kpd_id(m).startswith("warm-up")]
        assert_never_early(delivered)
        assert sorted(delivered_ids(delivered)) == sorted(
            [f"soon-{i}" for i in range(n)] + [f"later-{i}" for i in range(n)]
        )
        wait_for(lambda: held() == 0, 10, "nothing held once delivered")
        reads = metric_values(http)["kpd_schedule_index_reads_total"] - before
        assert reads == 2 * n, f"{reads} index reads for {2 * n} new ids delivered"
