"""One record fails only itself (docs/principles.md, 6), property-based, against a real sidecar.

Hypothesis interleaves valid buffer records with hostile ones (oversized, near the limit, targets
that are Kafka-internal, kpd's own, missing or too small for the record, ids with whitespace,
30-digit times, non-ASCII control headers) and popped records with forged kpd headers and sizes
kpd cannot retry. Every valid record must be delivered exactly once and never early, every bad
one must be settled with a reason (`kpd.invalid` / the group's DLQ), and no leader role may
restart: a rebuild is for infrastructure faults, never a loop over one record.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kafka_helpers import (
    TopicCleanup,
    TopicReader,
    header_dict,
    leader_restarts,
    make_producer,
    now_ms,
    produce_all,
    unique,
    wait_for,
)

from devtools.local_sidecar import SidecarProcess, isolated_env
from kpd_client import KpdClient

MAX = 16_384  # KPD_MAX_RECORD_BYTES of the sidecar under test: small, so big records are cheap
TINY_TOPIC_LIMIT = 2_048  # max.message.bytes of a target too small for some valid records
SEQ = "hyp-seq"  # first header of every test record: identifies it wherever it lands
RUN = "hyp-run"  # which example the record belongs to
PROFILE = settings(
    max_examples=5,
    deadline=None,
    derandomize=True,  # the same examples on every run, so CI is repeatable
    # Each example costs seconds of real Kafka: report a failure as found, without shrinking.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class World:
    """A sidecar with its namespace, targets and readers, shared by the examples."""

    def __init__(self, bootstrap: str, admin: AdminClient, home: Path) -> None:
        self.bootstrap, self.admin = bootstrap, admin
        self.created: set[str] = set()  # deleted with the namespace once the module is done
        self.namespace = unique("kpdhostile")
        self.buffer = f"{self.namespace}.delay"
        self.invalid = f"{self.namespace}.invalid"
        self.good, self.tiny, self.popped = unique("good"), unique("tiny"), unique("popped")
        # Holds records kpd must refuse or truncate (and whole batches of them).
        big = {"max.message.bytes": str(2 * 1024 * 1024)}
        self._create(self.buffer, big)
        self._create(self.good, {})
        self._create(self.tiny, {"max.message.bytes": str(TINY_TOPIC_LIMIT)})
        self._create(self.popped, big)
        env = isolated_env(
            bootstrap, "h", home / "data", self.namespace, max_record_bytes=str(MAX),
            group_defaults__backoff_ms="[0]",
        )  # fmt: skip
        self.sidecar = SidecarProcess(env, home / "sidecar.log")
        self.restarts_at_start = 0.0
        self.producer = make_producer(bootstrap)
        self.readers: dict[str, TopicReader] = {}  # made on first use, once the topic exists

    def _create(self, topic: str, config: dict[str, str]) -> None:
        self.created.add(topic)
        futures = self.admin.create_topics([NewTopic(topic, 1, 1, config=config)])
        futures[topic].result(timeout=30)

    def seen(self, topic: str, run: str) -> list:
        """Records of one example (by its run id) read so far from `topic`."""
        reader = self.readers.get(topic)
        if reader is None:
            reader = self.readers[topic] = TopicReader(self.bootstrap, topic)
        reader.poll(0.05)
        return [m for m in reader.messages if header_dict(m).get(RUN) == run.encode()]

    def restarts(self) -> float:
        with httpx.Client(base_url=self.sidecar.url, timeout=10) as http:
            return leader_restarts(http)


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    world = World(kafka_bootstrap, admin, tmp_path_factory.mktemp("hostile"))
    world.sidecar.launch(timeout_s=60)
    world.restarts_at_start = world.restarts()  # what hostile input does is counted from here
    yield world
    world.sidecar.stop()
    for reader in world.readers.values():
        reader.close()
    cleanup = TopicCleanup(admin)  # module-scoped: the per-test cleanup does not see these
    cleanup.names.update(world.created)
    cleanup.prefixes.add(f"{world.namespace}.")
    cleanup.delete_all()


# -- buffer records --------------------------------------------------------------------------

VALID = ("valid", "valid_near_limit", "valid_to_tiny")
INVALID = {  # kind -> a phrase of the kpd-error it must get
    "oversized": "exceeds the",  # over the limit, but its invalid copy still fits
    "far_oversized": "exceeds the",  # so big that only a truncated copy fits
    "too_big_for_target": "cannot write to",
    "internal_target": "Kafka-internal",
    "kpd_target": "is a kpd topic",
    "missing_target": "does not exist",
    "id_with_newline": "must be 1..128",
    "thirty_digit_delay": "out of range",
    "non_ascii_header": "is not ASCII",
    "duplicate_header": "more than once",
}
KINDS = (*VALID, *INVALID)


def buffer_record(world: World, kind: str, seq: str, run: str, size: int) -> tuple:
    """(key, value, headers) of one record of `kind`; `size` sizes the payload where it matters."""
    headers = [(SEQ, seq.encode()), (RUN, run.encode())]
    target, value = world.good, b"v" * 10
    control = [("kpd-delay-ms", b"200"), ("kpd-id", f"{run}-{seq}".encode())]
    if kind == "valid_near_limit":
        value = b"n" * (MAX - 400)
    elif kind == "valid_to_tiny":
        target = world.tiny
    elif kind == "oversized":
        value = b"o" * (MAX + size)
    elif kind == "far_oversized":
        value = b"f" * (3 * MAX + size)
    elif kind == "too_big_for_target":
        target, value = world.tiny, b"t" * (TINY_TOPIC_LIMIT * 2)
    elif kind == "internal_target":
        target = "__consumer_offsets"
    elif kind == "kpd_target":
        target = f"{world.namespace}.schedules"
    elif kind == "missing_target":
        target = unique("nowhere")
    elif kind == "id_with_newline":
        control[1] = ("kpd-id", f"{run}-{seq}\n".encode())
    elif kind == "thirty_digit_delay":
        control[0] = ("kpd-delay-ms", b"9" * 30)
    elif kind == "non_ascii_header":
        control[0] = ("kpd-delay-ms", "\uff12\uff10\uff10".encode())  # fullwidth "200"
    elif kind == "duplicate_header":
        control.append(("kpd-delay-ms", b"5"))
    return b"k", value, [*headers, ("kpd-target", target.encode()), *control]


@PROFILE
@given(
    kinds=st.permutations(KINDS).flatmap(
        lambda every: st.lists(st.sampled_from(KINDS), max_size=6).map(lambda more: every + more)
    ),
    sizes=st.lists(st.integers(1, 4_000), min_size=20, max_size=20),
)
def test_buffer_records_fail_only_themselves(world: World, kinds: list, sizes: list) -> None:
    run = uuid.uuid4().hex[:10]
    records = [
        buffer_record(world, kind, str(i), run, sizes[i % len(sizes)])
        for i, kind in enumerate(kinds)
    ]
    produced_at = now_ms()
    produce_all(world.producer, world.buffer, records)
    expect_valid = {str(i) for i, kind in enumerate(kinds) if kind in VALID}
    expect_invalid = {str(i): INVALID[kind] for i, kind in enumerate(kinds) if kind in INVALID}

    def delivered() -> list:
        return world.seen(world.good, run) + world.seen(world.tiny, run)

    def settled() -> bool:
        return len(delivered()) >= len(expect_valid) and len(world.seen(world.invalid, run)) >= len(
            expect_invalid
        )

    if not wait_for(settled, 60, "every record delivered or settled as invalid", fail=False):
        got = sorted(header_dict(m)[SEQ].decode() for m in delivered())
        bad = sorted(header_dict(m)[SEQ].decode() for m in world.seen(world.invalid, run))
        pytest.fail(
            f"delivered {got} of {sorted(expect_valid)}; invalid {bad} of "
            f"{sorted(expect_invalid)}; kinds {kinds}"
        )
    world.readers[world.good].read_for(0.5)  # a settle window: nothing more arrives
    seqs = Counter(header_dict(m)[SEQ].decode() for m in delivered())
    assert set(seqs) == expect_valid and set(seqs.values()) == {1}, seqs
    for message in delivered():
        assert message.timestamp()[1] >= int(header_dict(message)["kpd-deliver-at"])
        assert message.timestamp()[1] >= produced_at + 200  # never early
    invalid = {header_dict(m)[SEQ].decode(): m for m in world.seen(world.invalid, run)}
    assert set(invalid) == set(expect_invalid)
    for seq, phrase in expect_invalid.items():
        headers = header_dict(invalid[seq])
        assert phrase in headers["kpd-error"].decode(), (kinds[int(seq)], headers["kpd-error"])
        kind = kinds[int(seq)]
        if kind == "far_oversized":
            assert invalid[seq].value() is None and "kpd-truncated" in headers
        elif kind in ("oversized", "too_big_for_target"):  # the full payload is kept
            assert invalid[seq].value() == records[int(seq)][1]
            assert "kpd-truncated" not in headers
    assert world.restarts() == world.restarts_at_start


# -- popped records ---------------------------------------------------------------------------

POP_KINDS = {  # kind -> kpd headers a producer forged on a user topic, and payload size
    "plain": ([], 10),
    "forged_origin": (
        [
            ("kpd-origin-topic", b"elsewhere"),
            ("kpd-origin-partition", b"7"),
            ("kpd-origin-offset", b"9" * 30),
        ],
        10,
    ),
    "forged_huge_count": ([("kpd-delivery-count", b"9" * 30)], 10),
    "redriven_at_max": ([("kpd-delivery-count", b"16")], 10),  # a DLQ redrive: starts at 1
    "at_limit": ([], MAX - 60),  # fits, but not once kpd's retry headers are added
    "over_limit": ([], 3 * MAX),  # the topic holds it; kpd can only dead-letter it truncated
}
ACTIONS = ("ack", "nack", "reject")
UNTRUSTED_RETRY_HEADERS = [
    [("kpd-delivery-count", b"1")],  # no origin at all
    [("kpd-delivery-count", b"-3"), ("kpd-origin-topic", b"t"), ("kpd-origin-partition", b"0"),
     ("kpd-origin-offset", b"0")],
    [("kpd-delivery-count", b"2"), ("kpd-origin-topic", b"t"), ("kpd-origin-partition", b"0"),
     ("kpd-origin-offset", b"1" * 25)],
]  # fmt: skip


def answer(kind: str, action: str) -> str:
    if action == "ack":
        return "acked"
    return "requeued" if dead_letter_reason(kind, action) is None else "dead_lettered"


def dead_letter_reason(kind: str, action: str) -> str | None:
    if action == "reject":
        return "rejected"
    if action == "nack" and kind in ("at_limit", "over_limit"):
        return "cannot retry"
    return None


@PROFILE
@given(
    plan=st.permutations(list(POP_KINDS)).flatmap(
        lambda kinds: st.lists(
            st.sampled_from(ACTIONS), min_size=len(kinds), max_size=len(kinds)
        ).map(lambda actions: list(zip(kinds, actions, strict=True)))
    )
)
def test_popped_records_with_hostile_headers_and_sizes(world: World, plan: list) -> None:
    run, group, topic = uuid.uuid4().hex[:10], unique("hg"), unique("popped")
    world._create(topic, {"max.message.bytes": str(2 * 1024 * 1024)})
    records = [
        (b"k", b"p" * POP_KINDS[kind][1], [(SEQ, str(i).encode()), (RUN, run.encode()),
                                           *POP_KINDS[kind][0]])
        for i, (kind, _) in enumerate(plan)
    ]  # fmt: skip
    produce_all(world.producer, topic, records)
    with KpdClient(world.sidecar.url) as kpd:
        popped: dict[str, object] = {}
        while len(popped) < len(plan):
            for m in kpd.pop(group, topic, max_messages=len(plan), wait_ms=2000):
                popped[m.headers[SEQ]] = m
        for seq, message in popped.items():
            assert message.delivery_count == 1, (plan[int(seq)], message.delivery_count)
            assert (message.topic, message.partition, message.offset) == (topic, 0, int(seq))
            assert not any(name.startswith("kpd-") for name in message.headers)
        config = kpd.group(group)["config"]
        untrusted = [(b"u", f"untrusted-{i}".encode(), [(RUN, run.encode()), *h])
                     for i, h in enumerate(UNTRUSTED_RETRY_HEADERS)]  # fmt: skip
        produce_all(world.producer, config["retry_topic"], untrusted)
        for action in ACTIONS:
            receipts = [popped[str(i)].receipt for i, (_, a) in enumerate(plan) if a == action]
            if not receipts:
                continue
            results = getattr(kpd, action)(group, receipts)
            kinds = [kind for kind, a in plan if a == action]
            for kind, result in zip(kinds, results, strict=True):
                assert result["status"] == answer(kind, action), (kind, result)
        back_expected = {
            str(i) for i, (kind, action) in enumerate(plan)
            if action == "nack" and dead_letter_reason(kind, action) is None
        }  # fmt: skip
        back: dict[str, object] = {}
        deadline = now_ms() + 30_000
        while len(back) < len(back_expected) and now_ms() < deadline:
            for m in kpd.pop(group, topic, max_messages=10, wait_ms=1000):
                back[m.headers[SEQ]] = m
        assert set(back) == back_expected
        assert {m.delivery_count for m in back.values()} <= {2}
        if back:
            assert {r["status"] for r in kpd.ack(group, [m.receipt for m in back.values()])} == {
                "acked"
            }
        dead = {str(i): reason for i, (kind, action) in enumerate(plan)
                if (reason := dead_letter_reason(kind, action))}  # fmt: skip
        dlq = config["dlq_topic"]

        def dead_lettered() -> bool:
            # The untrusted retry records are read (and dead-lettered) as the group pops the
            # lanes of its retry topic: a pop visits one shard's lanes, so keep popping.
            assert kpd.pop(group, topic, max_messages=10, wait_ms=200) == []
            return len(world.seen(dlq, run)) >= len(dead) + len(UNTRUSTED_RETRY_HEADERS)

        wait_for(dead_lettered, 30, "dead letters")
    letters = world.seen(dlq, run)
    by_seq = {header_dict(m)[SEQ].decode(): m for m in letters if SEQ in header_dict(m)}
    assert set(by_seq) == set(dead)
    for seq, phrase in dead.items():
        headers = header_dict(by_seq[seq])
        assert phrase in headers["kpd-dlq-reason"].decode()
        assert headers["kpd-origin-offset"] == seq.encode()  # the real place, not a forged one
        kind = plan[int(seq)][0]
        if kind == "over_limit":  # too big for any copy: dead-lettered truncated
            assert by_seq[seq].value() is None and "kpd-truncated" in headers
        else:
            assert by_seq[seq].value() == records[int(seq)][1]
    distrusted = [m for m in letters if m.value() and m.value().startswith(b"untrusted-")]
    assert len(distrusted) == len(UNTRUSTED_RETRY_HEADERS)
    for letter in distrusted:
        assert "cannot be trusted" in header_dict(letter)["kpd-dlq-reason"].decode()
    assert world.restarts() == world.restarts_at_start
