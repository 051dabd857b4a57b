"""Every malformed buffer record goes to the invalid topic with a reason; the rest keep flowing."""

from __future__ import annotations

from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    header_dict,
    leader_restarts,
    log_events,
    make_producer,
    now_ms,
    produce_all,
    wait_delivering,
    wait_for,
)

from delay_service.buffer_reader import INGEST_CHUNK

MAX_DELAY_MS = 60_000


def test_malformed_records_go_to_the_invalid_topic_and_valid_ones_flow(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a", max_delay_ms=str(MAX_DELAY_MS), max_record_bytes="1024").start()
    env = sidecar.env
    prefix = env["KPD_STATE_TOPIC_PREFIX"]
    target = new_topic("valid")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    t0 = now_ms()
    due = str(t0 + 500).encode()

    cases: dict[str, tuple[list[tuple[str, bytes | None]], bytes, str]] = {
        # case -> (headers, value, expected fragment of kpd-error)
        "missing-target": ([("kpd-deliver-at", due)], b"v", "missing kpd-target"),
        "unparsable-at": (
            [("kpd-target", target.encode()), ("kpd-deliver-at", b"tomorrow")],
            b"v",
            "kpd-deliver-at 'tomorrow' is not a non-negative decimal integer",
        ),
        "unparsable-delay": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"1e3")],
            b"v",
            "kpd-delay-ms '1e3' is not a non-negative decimal integer",
        ),
        "empty-delay": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"")],
            b"v",
            "kpd-delay-ms '' is not a non-negative decimal integer",
        ),
        "negative-at": (
            [("kpd-target", target.encode()), ("kpd-deliver-at", b"-5")],
            b"v",
            "kpd-deliver-at '-5' is not a non-negative decimal integer",
        ),
        "negative-delay": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"-1000")],
            b"v",
            "kpd-delay-ms '-1000' is not a non-negative decimal integer",
        ),
        "huge-time": (
            [("kpd-target", target.encode()), ("kpd-deliver-at", b"9" * 40)],
            b"v",
            "out of range",
        ),
        "both-times": (
            [("kpd-target", target.encode()), ("kpd-deliver-at", due), ("kpd-delay-ms", b"5")],
            b"v",
            "exactly one of kpd-deliver-at and kpd-delay-ms is required",
        ),
        "neither-time": (
            [("kpd-target", target.encode())],
            b"v",
            "exactly one of kpd-deliver-at and kpd-delay-ms is required",
        ),
        "beyond-max-delay": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", str(MAX_DELAY_MS + 1).encode())],
            b"v",
            f"exceeds the max delay of {MAX_DELAY_MS} ms",
        ),
        "beyond-max-at": (
            [
                ("kpd-target", target.encode()),
                ("kpd-deliver-at", str(t0 + MAX_DELAY_MS + 60_000).encode()),
            ],
            b"v",
            f"is beyond the max delay of {MAX_DELAY_MS} ms",
        ),
        "id-too-long": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"0"), ("kpd-id", b"x" * 129)],
            b"v",
            "must be 1..128 of [A-Za-z0-9._:-]",
        ),
        "id-bad-chars": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"0"), ("kpd-id", b"a/b c")],
            b"v",
            "kpd-id 'a/b c' must be 1..128",
        ),
        "id-empty": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"0"), ("kpd-id", b"")],
            b"v",
            "kpd-id '' must be 1..128",
        ),
        "cancel-bad-id": ([("kpd-cancel", b"../etc")], b"v", "kpd-cancel '../etc' must be 1..128"),
        "non-ascii-target": (
            [("kpd-target", "t\u00e9t\u00e9".encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "header kpd-target is not ASCII",
        ),
        "non-ascii-time": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"\xff\xfe")],
            b"v",
            "header kpd-delay-ms is not ASCII",
        ),
        "bad-topic-name": (
            [("kpd-target", b"no/such topic"), ("kpd-delay-ms", b"0")],
            b"v",
            "is not a valid topic name",
        ),
        "missing-topic": (
            [("kpd-target", b"kpd-test-no-such-topic-4711"), ("kpd-delay-ms", b"0")],
            b"v",
            "kpd-target 'kpd-test-no-such-topic-4711' does not exist",
        ),
        "target-buffer": (
            [("kpd-target", env["KPD_BUFFER_TOPIC"].encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "target-invalid": (
            [("kpd-target", env["KPD_INVALID_TOPIC"].encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "target-log": (
            [("kpd-target", env["KPD_DELIVERY_LOG_TOPIC"].encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "target-schedules": (
            [("kpd-target", f"{prefix}schedules".encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "target-election": (
            [("kpd-target", f"{prefix}leader".encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "target-pop-state": (
            [("kpd-target", f"{prefix}pop-state".encode()), ("kpd-delay-ms", b"0")],
            b"v",
            "is a kpd topic",
        ),
        "oversized": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"0")],
            b"x" * 2000,
            "exceeds the 1024 limit",
        ),
        "duplicate-target": (
            [
                ("kpd-target", target.encode()),
                ("kpd-target", target.encode()),
                ("kpd-delay-ms", b"0"),
            ],
            b"v",
            "header kpd-target given more than once",
        ),
        "duplicate-delay": (
            [("kpd-target", target.encode()), ("kpd-delay-ms", b"0"), ("kpd-delay-ms", b"1")],
            b"v",
            "header kpd-delay-ms given more than once",
        ),
    }

    # Each malformed record is followed by a valid one; the buffer topic has one partition, so
    # a stuck partition would hold back every valid record behind the first bad one.
    records = []
    valid_ids = set()
    for n, (case, (control, value, _)) in enumerate(cases.items()):
        headers = [("case", case.encode()), ("user", b"kept"), *control]
        records.append((f"key-{case}".encode(), value, headers))
        valid_ids.add(f"ok-{n}")
        records.append(
            buffer_record(target, value=f"ok-{n}".encode(), delay_ms=300, schedule_id=f"ok-{n}")
        )
    produce_all(make_producer(kafka_bootstrap), env["KPD_BUFFER_TOPIC"], records)

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_count(len(valid_ids), 30)
        delivered = reader.read_for(0.5)
    assert_exactly_once(delivered, valid_ids)
    assert_never_early(delivered)

    with TopicReader(kafka_bootstrap, env["KPD_INVALID_TOPIC"]) as reader:
        # Every valid record behind them is delivered, so every bad one has been judged by now.
        invalid = reader.read_for(2.0)
    by_case = {header_dict(m)["case"].decode(): m for m in invalid}
    assert set(cases) - set(by_case) == set(), "malformed records not sent to the invalid topic"
    assert len(invalid) == len(cases)
    for case, (control, value, reason) in cases.items():
        message = by_case[case]
        assert message.key() == f"key-{case}".encode(), case
        assert message.value() == value, case
        original = [("case", case.encode()), ("user", b"kept"), *control]
        assert message.headers()[:-1] == original, case
        name, error = message.headers()[-1]
        assert name == "kpd-error"
        assert reason in error.decode(), f"{case}: {error!r} does not say {reason!r}"

    with TopicReader(kafka_bootstrap, env["KPD_DELIVERY_LOG_TOPIC"]) as reader:
        events = log_events(
            reader.read_until(
                lambda ms: sum(b'"invalid"' in m.value() for m in ms) >= len(cases), 30, "log"
            )
        )
    reasons = [e["reason"] for e in events if e["event"] == "invalid"]
    assert len(reasons) == len(cases)
    for _, _, reason in cases.values():
        assert any(reason in r for r in reasons), reason


def test_a_target_deleted_before_due_does_not_block_other_deliveries(
    sidecar_factory, new_topic, admin, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    doomed, alive = new_topic("doomed"), new_topic("alive")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
        t0 = now_ms()
        produce_all(
            make_producer(kafka_bootstrap),
            sidecar.env["KPD_BUFFER_TOPIC"],
            [
                buffer_record(doomed, value=b"d", deliver_at=t0 + 1500, schedule_id="doomed"),
                buffer_record(alive, value=b"a", deliver_at=t0 + 2500, schedule_id="alive"),
            ],
        )
        # Both, before the target goes: on a buffer with several partitions the two records
        # reach their shards in either order, and a target already gone is refused at ingest.
        for sid in ("doomed", "alive"):
            wait_for(
                lambda sid=sid: http.get(f"/v1/schedules/{sid}").json().get("state") == "scheduled",
                10,
                f"{sid} scheduled",
            )
    admin.delete_topics([doomed])[doomed].result(timeout=30)
    with TopicReader(kafka_bootstrap, alive) as reader:
        reader.read_count(1, 30)
    # The doomed schedule did not vanish: it is in the invalid topic, with why, and GET says so.
    with TopicReader(kafka_bootstrap, sidecar.env["KPD_INVALID_TOPIC"]) as reader:
        invalid = reader.read_until(
            lambda found: any(header_dict(m).get("kpd-id") == b"doomed" for m in found),
            30,
            "the doomed copy",
        )
    [copy] = [m for m in invalid if header_dict(m).get("kpd-id") == b"doomed"]
    assert copy.value() == b"d"
    assert doomed.encode() in header_dict(copy)["kpd-error"]  # names the unwritable target
    with sidecar.client() as http:
        assert http.get("/v1/schedules/doomed").json()["state"] == "cancelled"


def test_a_past_due_record_too_big_for_its_target_is_settled_and_its_neighbours_flow(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """Ingested and dispatched in the same step, then refused by the broker: steps run without
    delivery reports, so the failed step is redone with them to name the record. The redo's
    first step may run before the rewound buffer records come back; it must not end the tracking
    (it did, and the record looped through untracked steps for good). A step reads its records
    in chunks: the rewind goes back to the step's first record of each partition, so neighbours
    read in earlier chunks than the refused record come back too, and each is delivered once."""
    sidecar = sidecar_factory("a").start()
    tiny = new_topic("tiny", config={"max.message.bytes": "2048"})
    fine = new_topic("fine")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
        restarts_before = leader_restarts(http)
        producer = make_producer(kafka_bootstrap)
        past = now_ms() - 1000
        neighbours = [
            buffer_record(tiny, value=b"small", deliver_at=past, schedule_id=f"fits-{i}")
            for i in range(2 * INGEST_CHUNK * 3)
        ]
        half = len(neighbours) // 2
        records = [
            *neighbours[:half],
            buffer_record(tiny, value=b"x" * 4096, deliver_at=past, schedule_id="too-big"),
            *neighbours[half:],
            buffer_record(fine, value=b"other", deliver_at=past, schedule_id="elsewhere"),
        ]
        produce_all(producer, sidecar.env["KPD_BUFFER_TOPIC"], records)
        with TopicReader(kafka_bootstrap, sidecar.env["KPD_INVALID_TOPIC"]) as invalid:
            [refused] = invalid.read_count(1, 30)
        assert header_dict(refused)["kpd-id"] == b"too-big"
        assert b"too large" in header_dict(refused)["kpd-error"].lower()
        with TopicReader(kafka_bootstrap, tiny) as reader:
            reader.read_count(len(neighbours), 30)
            assert_exactly_once(reader.read_for(1.0), {f"fits-{i}" for i in range(len(neighbours))})
        with TopicReader(kafka_bootstrap, fine) as reader:
            assert [m.value() for m in reader.read_count(1, 30)] == [b"other"]
        assert leader_restarts(http) == restarts_before  # settled by redoing steps, not by restarts
