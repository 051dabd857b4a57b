"""DLQ redrive over real HTTP against real Kafka: dead letters back to their group, each once."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections import Counter

import httpx
import pytest
from confluent_kafka import Producer
from kafka_helpers import TopicReader, fetch_quota, pop_until, unique, wait_for
from test_cli import DONE, FAILED, expect, lines
from test_cli import kpd as kpd_cli

from kpd_client import KpdClient

FAST_GROUPS = {"group_defaults__backoff_ms": "[1500]", "group_defaults__max_deliveries": "3"}


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value.encode(), key=value.encode())
    assert producer.flush(30) == 0


def dead_letter(kpd: KpdClient, group: str, topic: str, count: int) -> None:
    popped = pop_until(kpd, group, topic, count)
    assert len(popped) == count
    results = kpd.reject(group, [m.receipt for m in popped], reason="bug")
    assert [r["status"] for r in results] == ["dead_lettered"] * count


def popped_values(kpd: KpdClient, group: str, topic: str, count: int) -> Counter[bytes]:
    """Pop `count` messages (in batches of the API's most) and ack them; their values, each
    delivered for the first time."""
    values: Counter[bytes] = Counter()
    while (wanted := min(1000, count - values.total())) > 0:
        popped = pop_until(kpd, group, topic, wanted)
        assert len(popped) == wanted
        assert {m.delivery_count for m in popped} == {1}
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
        values.update(m.value for m in popped)
    return values


def test_dead_letters_go_back_to_their_group_once_counting_from_one(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    leader = sidecar_factory("a", **FAST_GROUPS).start()
    group, other = unique("g"), unique("other")
    orders, refunds = new_topic(), new_topic()
    produce(kafka_bootstrap, orders, ["o1", "o2", "o3"])
    produce(kafka_bootstrap, refunds, ["r1", "r2"])
    with KpdClient(leader.url) as kpd:
        dead_letter(kpd, group, orders, 3)
        dead_letter(kpd, group, refunds, 2)
        assert kpd.redrive(group, topic=orders) == {"moved": 3, "remaining": 0}
        assert popped_values(kpd, group, orders, 3) == Counter([b"o1", b"o2", b"o3"])
        assert kpd.redrive(group, max_messages=1) == {"moved": 1, "remaining": 1}
        assert kpd.redrive(group) == {"moved": 1, "remaining": 0}
        assert kpd.redrive(group) == {"moved": 0, "remaining": 0}
        assert popped_values(kpd, group, refunds, 2) == Counter([b"r1", b"r2"])
        # Nothing more comes back to the group, and another group of the same topic sees each
        # original once: the redrive wrote to this group's retry topic only.
        produce(kafka_bootstrap, orders, ["marker"])
        assert popped_values(kpd, group, orders, 1) == Counter([b"marker"])
        assert popped_values(kpd, other, orders, 4) == Counter([b"o1", b"o2", b"o3", b"marker"])
        assert kpd.group(group)["dead_lettered"] == 5


def test_a_topic_filter_leaves_the_other_dead_letters_for_a_later_redrive(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    leader = sidecar_factory("a", **FAST_GROUPS).start()
    group = unique("g")
    orders, refunds = new_topic(), new_topic()
    produce(kafka_bootstrap, refunds, ["r0", "r1"])
    produce(kafka_bootstrap, orders, ["o0", "o1"])
    with KpdClient(leader.url) as kpd:
        leased = {m.value: m.receipt for m in pop_until(kpd, group, refunds, 2)}
        leased |= {m.value: m.receipt for m in pop_until(kpd, group, orders, 2)}
        for value in (b"r0", b"o0", b"r1", b"o1"):  # interleaved in the DLQ
            [result] = kpd.reject(group, [leased[value]], reason="bug")
            assert result["status"] == "dead_lettered"
        assert kpd.redrive(group, topic=orders, max_messages=1) == {"moved": 1, "remaining": 1}
        assert kpd.redrive(group, topic=unique("none")) == {"moved": 0, "remaining": 0}
        assert kpd.redrive(group, topic=orders) == {"moved": 1, "remaining": 0}
        url = ("--url", leader.url)
        redriven = expect(kpd_cli("redrive", group, *url), DONE)  # the refunds, passed twice
        assert lines(redriven) == [{"moved": 2, "remaining": 0}]
        assert kpd.redrive(group) == {"moved": 0, "remaining": 0}
        unknown = expect(kpd_cli("redrive", unique("g"), *url), FAILED)
        assert "group_not_found" in unknown.stderr
        assert popped_values(kpd, group, orders, 2) == Counter([b"o0", b"o1"])
        assert popped_values(kpd, group, refunds, 2) == Counter([b"r0", b"r1"])


@pytest.mark.parametrize(
    "body",
    [
        {"max_messages": 0},
        {"max_messages": 100_001},
        {"max_messages": True},
        {"topic": "a/b"},
        {"topic": "x" * 250},
        {"topic": ""},
        {"everything": True},
    ],
)
def test_a_redrive_out_of_bounds_is_a_422(sidecar_factory, body: dict) -> None:
    leader = sidecar_factory("a").start()
    with leader.client() as http:
        answer = http.post("/v1/groups/g/redrive", json=body)
    assert answer.status_code == 422
    assert answer.json()["code"] == "invalid_request"


def test_a_group_that_never_popped_has_nothing_to_redrive(sidecar_factory) -> None:
    leader = sidecar_factory("a").start()
    with leader.client() as http:
        answer = http.post(f"/v1/groups/{unique('g')}/redrive", json={})
    assert answer.status_code == 404
    assert answer.json()["code"] == "group_not_found"


def forged_dead_letters(bootstrap: str, dlq: str, origin: str, count: int) -> None:
    """Dead letters as kpd writes them (its headers), many more than a test could reject."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        headers = [
            ("kpd-delivery-count", b"3"),
            ("kpd-origin-topic", origin.encode()),
            ("kpd-origin-partition", b"0"),
            ("kpd-origin-offset", str(i).encode()),
            ("kpd-dlq-reason", b"max deliveries (3) reached"),
        ]
        producer.produce(dlq, f"v{i}".encode(), f"k{i}".encode(), headers=headers)
        producer.poll(0)
    assert producer.flush(30) == 0


# The broker's quota on sidecar a's reads while its redrive runs: 30,000 dead letters (some
# 6 MB) then take it some 15 s, so the test acts on it mid-way whatever the machine's speed.
SLOW_READ_BYTES_PER_S = 400_000


def slowed(bootstrap: str, sidecar) -> contextlib.AbstractContextManager[None]:
    return fetch_quota(bootstrap, f"kpd-{sidecar.env['KPD_NODE_ID']}", SLOW_READ_BYTES_PER_S)


def two_sidecars_and_dead_letters(
    sidecar_factory, new_topic, kafka_bootstrap: str, count: int
) -> tuple:
    """Sidecars a and b (one worker each), a group that popped once on b (so its topics exist),
    and `count` dead letters of its topic in its DLQ. A's node id is the test's own: its client
    id is what `slowed` throttles, on a broker other tests' sidecars share."""
    a = sidecar_factory(unique("a"), workers="1").start()
    b = sidecar_factory("b", workers="1").start()
    group, orders = unique("g"), new_topic()
    produce(kafka_bootstrap, orders, ["first"])
    with KpdClient(b.url) as kpd:
        assert popped_values(kpd, group, orders, 1) == Counter([b"first"])
    forged_dead_letters(kafka_bootstrap, a.dlq_topic(group), orders, count)
    return a, b, group, orders


def test_a_redrive_killed_midway_and_done_again_elsewhere_moves_each_once(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    count = 30_000
    a, b, group, orders = two_sidecars_and_dead_letters(
        sidecar_factory, new_topic, kafka_bootstrap, count
    )

    def redrive_on_a() -> None:  # the connection ends with the process
        with contextlib.suppress(httpx.TransportError), a.client() as http:
            http.post(f"/v1/groups/{group}/redrive", json={"max_messages": 100_000}, timeout=120)

    killed_midway = threading.Thread(target=redrive_on_a)
    with (
        slowed(kafka_bootstrap, a),
        TopicReader(kafka_bootstrap, a.retry_topic(group)) as retries,
    ):
        killed_midway.start()
        wait_for(lambda: retries.poll(0.05), 60, "the first redriven copies committed")
        a.terminate(signal.SIGKILL)
    killed_midway.join(30)
    assert not killed_midway.is_alive()
    with KpdClient(b.url) as kpd:
        answer = kpd.redrive(group, max_messages=100_000)
        assert 0 < answer["moved"] < count, answer  # a had moved some, not all
        assert answer["remaining"] == 0
        assert kpd.redrive(group) == {"moved": 0, "remaining": 0}
        values = popped_values(kpd, group, orders, count)
    assert values == Counter(f"v{i}".encode() for i in range(count))


def test_a_second_redrive_stops_the_first_and_each_goes_back_once(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    count = 30_000
    a, b, group, orders = two_sidecars_and_dead_letters(
        sidecar_factory, new_topic, kafka_bootstrap, count
    )
    answers: list[httpx.Response] = []

    def redrive_on_a() -> None:
        with a.client() as http:
            answers.append(http.post(f"/v1/groups/{group}/redrive", json={"max_messages": count}))

    first = threading.Thread(target=redrive_on_a)
    with (
        slowed(kafka_bootstrap, a),
        TopicReader(kafka_bootstrap, a.retry_topic(group)) as retries,
    ):
        first.start()
        wait_for(lambda: retries.poll(0.05), 60, "the first redriven copies committed")
        with KpdClient(b.url) as kpd:
            second = kpd.redrive(group, max_messages=count)
    first.join(60)
    [stopped] = answers
    assert stopped.status_code == 409, stopped.text
    assert stopped.json()["code"] == "redrive_running"
    assert 0 < second["moved"] < count and second["remaining"] == 0, second
    with KpdClient(b.url) as kpd:
        assert kpd.redrive(group) == {"moved": 0, "remaining": 0}
        values = popped_values(kpd, group, orders, count)
    assert values == Counter(f"v{i}".encode() for i in range(count))
