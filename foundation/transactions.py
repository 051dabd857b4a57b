"""One Kafka transaction per leader step, and which of its records the broker refused.

A leader step writes everything it changes in one transaction (docs/principles.md, 2). When the
broker refuses one record for what it is (too large for its topic, a topic that may not be written
or does not exist) that is a *verdict* on that record: the caller aborts, settles the record with
the reason and redoes the step without it (docs/principles.md, 6). A purge (`_PURGE_QUEUE`,
`_PURGE_INFLIGHT`) is only what an abort does to the records still queued, never a verdict, so
innocent neighbours are never blamed. Anything else (timeouts, fencing, a broker away) is an
infrastructure fault: it propagates, and the supervisor restarts the role from Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from functools import cache
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from foundation.bounded_call import call_within
from foundation.metrics import TRANSACTION_SECONDS
from foundation.plain_records import Callback, PlainRecords
from foundation.producers_in_turn import ProducersInTurn
from foundation.record_size import record_bytes
from foundation.refusals import (
    PURGES,
    VERDICTS,
    RecordsRefused,
    Refusal,
    RefusalUnknown,
)

FLUSH_SLICE_S = 0.05  # a commit's wait for delivery reports looks this often for a refusal


@cache
def _phase_seconds(role: str, phase: str) -> Any:
    return TRANSACTION_SECONDS.labels(role, phase)


class Transaction:
    """Records of one step: begun on the first write, so an idle step costs no round trip.

    `tracked=False` is the fast path for steps where a refusal is rare (dispatch): tagged records
    ask for no delivery report either (no closure, no Python call, no Message object per record),
    and a failed commit raises `RefusalUnknown` instead of naming them.
    """

    _producer: Producer  # the one of `producers` taken when the transaction began

    def __init__(
        self,
        producers: ProducersInTurn,
        timeout_s: float,
        tracked: bool = True,
        role: str | None = None,
    ) -> None:
        self._producers = producers
        self._role = role  # for `kpd_transaction_seconds`; None: not measured
        self._timeout_s = timeout_s
        self._tracked = tracked
        self._untracked_tags = False  # a tagged record went without a delivery report
        self.open = False
        self.used = False  # a transaction was begun (and, unless it raised, committed)
        self.refused: dict[Hashable, Refusal] = {}  # tag -> why the broker refused that record
        self._failure: KafkaError | None = None  # an untagged record failed: infrastructure
        # The transaction had already failed when a record was queued: a refusal (or a lost
        # record) reported in the background puts it in the abortable state, where librdkafka
        # refuses every later record with _STATE. Not a fault of its own: `commit` says why.
        self._failed_early: KafkaError | None = None
        self._plain = PlainRecords()  # records of `add`, not yet handed to the producer

    def begin(self) -> None:
        if not self.open:
            self._producer = self._producers.take()
            self._producer.begin_transaction()
            self.open = self.used = True

    def produce(
        self,
        topic: str,
        key: bytes | str | None,
        value: bytes | None,
        tag: Hashable | None = None,
        **kw: Any,
    ) -> None:
        """Queue one record. With a `tag`, a refusal raises `RecordsRefused({tag: reason})` at
        once (client-side checks) or at `commit` (the broker's answer); without one, any error
        is an infrastructure fault."""
        if not self.open:  # checked here, as in `add`: a burst produces every delivery
            self.begin()
        if topic in self._plain.topics:  # the topic's records stay in the order they were written
            self.send_added()
        if self._failed_early is not None:
            return  # the transaction will be aborted: nothing more is worth queueing
        if kw.get("on_delivery") is not None or (tag is not None and self._tracked):
            kw["on_delivery"] = self._tracker(tag, kw.get("on_delivery"))
        elif tag is not None:
            self._untracked_tags = True
        # Else no delivery report at all (copies, untracked targets, as most records of `add`),
        # which spares a closure, a Python call and a Message object per record: a record that
        # fails puts the transaction in the abortable state, so `commit` raises all the same.
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **kw)
                return
            except BufferError:  # the local queue is full: let librdkafka send some first
                self._producer.poll(0.01)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError._STATE:
                    self._failed_early = error
                    return
                if tag is None or error.code() not in VERDICTS:
                    raise
                size = record_bytes(key if isinstance(key, bytes) else None, value, [])
                refusal = Refusal.of(topic, error, size)
                raise RecordsRefused({tag: refusal}) from None

    def add(
        self,
        topic: str,
        key: str,
        value: bytes,
        partition: int = -1,
        on_delivery: Callback | None = None,
    ) -> None:
        """Queue a plain record (no headers, no tag; `partition` -1: the partitioner's). It is
        handed to the producer with others (`foundation.plain_records`), in the order added,
        before the commit and before any `produce` to the same topic. A refusal is an
        infrastructure fault, as for an untagged `produce`."""
        if not self.open:  # checked here: `add` runs for most records of a step
            self.begin()
        if self._failed_early is not None:
            return
        tracker = None if on_delivery is None else self._tracker(None, on_delivery)
        if self._plain.add(topic, key, value, partition, tracker):
            self.send_added()

    def add_many(self, topic: str, records: list[tuple[str, bytes]]) -> None:
        """`add` of (key, value) records, for the producer's partitioner, in one call."""
        self.begin()
        if self._failed_early is None and self._plain.extend(topic, records):
            self.send_added()

    def send_added(self) -> None:
        """Hand what `add` queued to the producer now (else it goes with a full batch or at the
        commit): records sent together join the transaction in one request."""
        if not self.open:
            return  # nothing was added since it began, or since its abort
        refused = self._plain.send(self._producer)
        if refused is not None:
            self._failed_early = refused

    def send_offsets(self, offsets: list[Any], group_metadata: Any) -> None:
        self.begin()
        started = time.perf_counter()
        try:
            call_within(
                self._timeout_s, "send_offsets_to_transaction",
                self._producer.send_offsets_to_transaction, offsets, group_metadata,
                self._timeout_s,
            )  # fmt: skip
            self._waited("offsets", started)
        except KafkaException as exc:
            # A record the broker refused already makes the transaction abortable, so this call
            # fails too: name that record if it was one (else the failure is the call's own).
            self._flush()
            self._raise_refusals()
            self._raise_failed(exc)

    def commit(self) -> None:
        """Commit; `RecordsRefused` (after aborting) if the broker refused tagged records."""
        if not self.open:
            return
        self.send_added()
        started = time.perf_counter()
        self._flush()  # every delivery report of this step is in, or one says it failed
        flushed = self._waited("write", started)
        self._raise_refusals()
        if self._failure is not None:
            raise KafkaException(self._failure)
        if self._failed_early is not None:  # records were left out: never commit the rest
            self._raise_failed(KafkaException(self._failed_early))
        try:
            self._producer.commit_transaction(self._timeout_s)
        except KafkaException as exc:
            self._raise_failed(exc)
        self._waited("commit", flushed)
        self.open = False

    def _flush(self) -> None:
        """Wait for the step's delivery reports, but not once one has said the transaction
        failed: the abort that follows purges the rest, which librdkafka would otherwise hold
        until the timeout (10 s), making every redo of a step with a refused record wait."""
        deadline = time.monotonic() + self._timeout_s
        while self._producer.flush(FLUSH_SLICE_S) > 0:
            if self.refused or self._failure is not None or time.monotonic() >= deadline:
                return

    def _waited(self, phase: str, since: float) -> float:
        """Note how long `phase` waited (if this transaction is measured); the time now."""
        now = time.perf_counter()
        if self._role is not None:
            _phase_seconds(self._role, phase).observe(now - since)
        return now

    def _raise_failed(self, exc: KafkaException) -> NoReturn:
        """The transaction failed: abort it if it can be, and say whether an untracked tagged
        record may be why (the caller then redoes the step tracked)."""
        if exc.args[0].txn_requires_abort() or self._failed_early is not None:
            self.abort()
            if self._untracked_tags:
                raise RefusalUnknown(str(exc)) from exc
        raise exc

    def _raise_refusals(self) -> None:
        """Once delivery reports are in: abort, and say which tagged records were refused, or
        that an untracked one may have been."""
        if self.refused:
            self.abort()
            raise RecordsRefused(dict(self.refused))
        if self._failure is not None and self._untracked_tags:
            self.abort()
            raise RefusalUnknown(self._failure.str())

    def abort(self) -> None:
        self._plain.clear()
        self._producer.abort_transaction(self._timeout_s)
        self.open = False

    def _tracker(self, tag: Hashable | None, then: Any) -> Any:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None and error.code() not in PURGES:
                if tag is not None and error.code() in VERDICTS:
                    topic = message.topic()
                    size = record_bytes(message.key(), message.value(), message.headers() or [])
                    self.refused[tag] = Refusal.of(topic, error, size)
                elif self._failure is None:
                    self._failure = error
            if then is not None:
                then(error, message)

        return delivered
