"""Steady delay and pop load for tests that break things meanwhile, and what to check after."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
from confluent_kafka import KafkaError, Message, Producer
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    now_ms,
    produce_one,
    wait_for,
)

from devtools.local_sidecar import plain_http
from kpd_client import KpdClient, PoppedMessage


class DelayLoad:
    """Schedules due 0.5-2 s ahead, produced steadily; only acknowledged ones are expected."""

    def __init__(self, bootstrap: str, buffer: str, target: str) -> None:
        # A long message timeout: records produced while the broker is away wait, not fail.
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True,
             "message.timeout.ms": 300_000, "linger.ms": 5}
        )  # fmt: skip
        self._bootstrap, self._buffer, self._target = bootstrap, buffer, target
        self.acknowledged: set[str] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DelayLoad:
        self._thread.start()
        return self

    def __exit__(self, failure: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        left = self._producer.flush(60)
        if failure is None:
            assert left == 0, f"{left} schedules never reached the buffer topic"

    def assert_delivered(self, quiet_s: float = 2.0) -> list[Message]:
        """Every schedule the buffer acknowledged reached the target exactly once, never early
        (after the load stopped; `quiet_s` of silence shows nothing more comes)."""
        assert not self.failed
        with TopicReader(self._bootstrap, self._target) as reader:
            reader.read_count(len(self.acknowledged), 120)
            messages = reader.read_for(quiet_s)
        assert_exactly_once(messages, self.acknowledged)
        assert_never_early(messages)
        return messages

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.02):
            schedule_id = f"load-{i}"
            key, value, headers = buffer_record(
                self._target, value=schedule_id.encode(), delay_ms=500 + (i % 4) * 500,
                schedule_id=schedule_id,
            )  # fmt: skip
            self._producer.produce(
                self._buffer, value=value, key=key, headers=headers,
                on_delivery=self._delivered(schedule_id),
            )  # fmt: skip
            self._producer.poll(0)
            i += 1

    def _delivered(self, schedule_id: str) -> Callable[[KafkaError | None, object], None]:
        def done(error: KafkaError | None, _: object) -> None:
            if error is None:
                self.acknowledged.add(schedule_id)
            else:
                self.failed.append(f"{schedule_id}: {error}")

        return done


class PopLoad:
    """A worker popping and acking through sidecars (in turn, when given several), riding out
    errors while Kafka is away or shards move."""

    def __init__(
        self, urls: str | list[str], group: str, topic: str, jobs: list[bytes], partitions: int
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        self.url, self.group, self.topic = self.urls[0], group, topic
        self.jobs, self.partitions = set(jobs), partitions  # what the popped topic holds
        self.seen: set[bytes] = set()  # popped at least once: the worker handled it
        # Acks answered acked / acked_late, or already_acked as the first answer: the call's
        # retry after a lost answer (its sidecar killed while answering; the ack had committed).
        self.acked: Counter[bytes] = Counter()
        self.after_ack: list[bytes | None] = []  # popped again after an ack: must stay empty
        self.history: dict[bytes, list[str]] = {}  # what happened to each job, for failures
        # Since when every pop came back empty and without error (None: the last one did not).
        self.empty_since: float | None = None
        self._unanswered: list[PoppedMessage] = []  # popped, their ack call failed: sent again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PopLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_settled(self, timeout_s: float = 120, quiet_s: float = 3.0) -> None:
        """Until every job is acked and the group idle, then until the worker's pops have come
        back empty for `quiet_s` after that: a retry copy of a lease kpd lost track of would come
        back through the delay service by then (and land in `after_ack`)."""
        why: list[str] = []

        def settled() -> bool:
            why[:] = [self._unsettled()]
            return not why[0]

        if not wait_for(settled, timeout_s, fail=False):
            pytest.fail(f"not settled after {timeout_s} s (every job acked, lag 0, idle): {why[0]}")
        settled_at = time.monotonic()

        def quiet() -> bool:
            since = self.empty_since
            return since is not None and time.monotonic() - max(since, settled_at) >= quiet_s

        wait_for(quiet, timeout_s, f"{quiet_s} s of empty pops after settling")

    def assert_each_acked_once(self) -> None:
        """Every job reached the worker, each was acked once, none came back after its ack."""
        assert self.seen == self.jobs, "a job was never handed to the worker"
        twice = [v for v, n in self.acked.items() if n > 1]
        back = [v for v in self.after_ack if v is not None]
        told = {v: self.history.get(v) for v in [*twice, *back][:3]}
        assert not twice and not back, f"acked twice: {twice}, came back: {back}; {told}"

    def _unsettled(self) -> str:
        """What still keeps the work from settling; empty once every job is acked and the group
        is idle (every partition of the topic reported with lag 0, none in flight)."""
        missing = self.jobs - set(self.acked)
        if missing:
            told = {v: self.history.get(v, ["never popped"]) for v in sorted(missing)[:3]}
            return f"{len(missing)} jobs not acked, e.g. {told} (group {self.group})"
        try:
            with KpdClient(self.url) as kpd:
                stats = kpd.group(self.group)["topics"].get(self.topic, {"partitions": {}})
        except Exception as error:
            return f"no stats: {error!r}"
        lags = {int(p): numbers["lag"] for p, numbers in stats["partitions"].items()}
        idle = stats.get("in_flight") == 0 and stats.get("retrying") == 0
        return "" if idle and lags == dict.fromkeys(range(self.partitions), 0) else f"{stats}"

    def _run(self) -> None:
        clients = [KpdClient(url, timeout_s=30) for url in self.urls]
        turn = 0
        while not self._stop.is_set():
            try:
                self._pop_and_ack(clients[turn % len(clients)])
            except Exception:  # Kafka away, leadership moving: what a worker rides out
                self.empty_since = None
                time.sleep(0.2)
            turn += 1
        for client in clients:
            client.__exit__()

    def _pop_and_ack(self, kpd: KpdClient) -> None:
        if self._unanswered:
            self._ack(kpd, self._unanswered)
        sent = time.monotonic()
        popped = kpd.pop(self.group, self.topic, max_messages=20, wait_ms=500)
        if not popped:  # nothing to ack (an empty ack is refused)
            if self.empty_since is None:
                self.empty_since = sent  # the long poll found nothing since it was sent
            return
        self.empty_since = None
        self.after_ack += [m.value for m in popped if self.acked[m.value or b""]]
        self.seen.update(m.value or b"" for m in popped)
        for m in popped:
            where = f"{m.topic}/{m.partition}@{m.offset}"
            self._tell(m.value, f"popped {where} #{m.delivery_count}")
        self._ack(kpd, popped)

    def _ack(self, kpd: KpdClient, popped: list[PoppedMessage]) -> None:
        """Ack what was popped; a call that fails is sent again first thing next time, as a
        worker would (its ack may have committed with the answer lost: `already_acked` then)."""
        self._unanswered = popped
        results = kpd.ack(self.group, [m.receipt for m in popped])
        self._unanswered = []
        for message, result in zip(popped, results, strict=True):
            self._tell(message.value, f"ack: {result['status']}")
            value = message.value or b""
            if result["status"] in ("acked", "acked_late") or (
                result["status"] == "already_acked" and not self.acked[value]
            ):
                self.acked[value] += 1

    def _tell(self, value: bytes | None, event: str) -> None:
        self.history.setdefault(value or b"", []).append(f"{time.time():.3f} {event}")


def ready(url: str) -> bool:
    try:
        with plain_http(url, 2) as http:
            return http.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def readiness(url: str) -> str:
    try:
        with plain_http(url, 2) as http:
            return http.get("/readyz").text
    except httpx.HTTPError as error:
        return f"unreachable: {error}"


def produce_backlog(bootstrap: str, buffer: str, target: str, n: int) -> None:
    """`n` schedules due in an hour (ids f0, f1, ...): a backlog a rebuilt index reads again."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    due = now_ms() + 3_600_000
    for i in range(n):
        key, value, headers = buffer_record(target, value=b"x", deliver_at=due, schedule_id=f"f{i}")
        produce_one(producer, buffer, key, value, headers)
    assert producer.flush(120) == 0
