"""What one pop-service step changes: one transaction, answered only after it commits.

The step gathers state records (one Kafka record per ledger and step, see `revive.records`),
the copies to make (retry, delayed retry, dead letter), delivery-log events and the answers to
give; `revive.service` commits it all at once and only then answers the callers. A pop of a
group whose leases are held in memory (`leases = "memory"`, docs/lease-modes.md) writes nothing
of its own: its checkpoints and events wait in `Unwritten` for the next transaction the shard
commits, where they go first, so each ledger's records stay in order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message

from foundation.delivery_log import Event
from foundation.producers_in_turn import ProducersInTurn
from foundation.transactions import Transaction
from revive.copies import Origin, copy_event
from revive.lanes import origin_topic
from revive.ledger import Outcome
from revive.pop_state import LedgerKey, PopState, Written
from revive.records import (
    AckRecord,
    AnswerRecord,
    CheckpointRecord,
    StateRecord,
    ack_records,
    pack_batch,
)
from revive.source_record import SourceRecord


@dataclass
class Copy:
    """A message to copy once the step has its payload: retry, delayed retry or DLQ."""

    key: LedgerKey
    offset: int
    delivery_count: int
    dead_letter_reason: str | None
    delay_ms: int
    answer: dict[str, Any] | None = None  # the caller's result, if a caller asked for this copy


# Unwritten DELIVERED events past which a memory-lease pop is written at once: what a shard
# holds of them stays bounded however long its leases last with no other transaction.
UNWRITTEN_MAX_EVENTS = 10_000


@dataclass
class Unwritten:
    """What pops of memory-lease groups handed out and no transaction has written yet, in the
    order of the pops: checkpoints and their DELIVERED events. A crash forgets them."""

    records: list[StateRecord] = field(default_factory=list)
    events: list[tuple[str, bytes]] = field(default_factory=list)  # (record id, log record)

    @property
    def full(self) -> bool:
        return len(self.events) >= UNWRITTEN_MAX_EVENTS

    def forget(self, keys: set[LedgerKey]) -> None:
        """Ledgers dropped (their topic deleted): their leases are never to be written."""
        self.records = [record for record in self.records if record.key not in keys]

    def take(self) -> tuple[list[StateRecord], list[tuple[str, bytes]]]:
        taken = self.records, self.events
        self.records, self.events = [], []
        return taken


class PopStep:
    def __init__(
        self,
        producers: ProducersInTurn,
        timeout_s: float,
        log_topic: str,
        node: str,
        unwritten: Unwritten,
    ) -> None:
        self.txn = Transaction(producers, timeout_s, role="pop")
        self._unwritten = unwritten
        self.groups: set[str] = set()  # groups whose committed offsets may move
        self.copies: list[Copy] = []
        self.settled: list[tuple[LedgerKey, int]] = []  # deliveries this step ends (ledger, offset)
        self.answers: list[tuple[Future[Any], Any]] = []
        self._records: dict[LedgerKey, list[bytes]] = {}  # each ledger's records, in order
        self._checkpoints: dict[LedgerKey, list[Written]] = {}  # checkpoints opened, per ledger
        self._answers: dict[LedgerKey, list[str]] = {}  # request ids of answers, per ledger
        self._log_topic, self._node = log_topic, node

    def record(self, record: StateRecord, durable: bool = True) -> None:
        """Add `record` to the step's transaction; one of a memory lease (not `durable`) waits
        for a transaction the step opens for something else, or for a later step's."""
        if not (durable or self.txn.open or self._unwritten.full):
            self._unwritten.records.append(record)
            return
        self._open()
        key = record.key
        self._records.setdefault(key, []).append(record.to_bytes())
        if isinstance(record, CheckpointRecord):
            written = (record.checkpoint_id, record.offsets[-1])
            self._checkpoints.setdefault(key, []).append(written)
        elif isinstance(record, AckRecord):
            self.settled.append((key, record.offset))
        elif isinstance(record, AnswerRecord):
            self._answers.setdefault(key, []).append(record.request_id)
        self.groups.add(record.group)

    def acked(self, key: LedgerKey, leases: list[tuple[int, int]], at_ms: int) -> None:
        """`record` of the ack records of one ledger's acked (checkpoint id, offset) leases."""
        self._open()
        self._records.setdefault(key, []).extend(ack_records(key, leases, Outcome.ACKED, at_ms))
        self.settled += [(key, offset) for _, offset in leases]
        self.groups.add(key[0])

    def drop_retries(self, group: str, topic: str | None = None) -> None:
        """The retries this step was to write for `group` (for `topic`'s messages, if given)
        are of deliveries a seek or a delete ends: dropped. Dead letters still go."""
        self.copies = [
            copy
            for copy in self.copies
            if copy.dead_letter_reason is not None
            or copy.key[0] != group
            or (topic is not None and origin_topic(copy.key[1]) != topic)
        ]

    def write_records(self, state_topic: str, state: PopState) -> None:
        """One state-topic record per ledger and step, in its shard's partition, so a ledger
        stays ordered; where each checkpoint landed is noted for the replay floor. The
        transaction is open: what memory leases left unwritten goes in too."""
        self._carry()
        for key, encoded in self._records.items():
            held = self._checkpoints.get(key, []), self._answers.get(key, [])
            written = _noting(state, key, held)
            self.txn.produce(
                state_topic, "/".join(map(str, key)), pack_batch(encoded),
                partition=state.partition_of(key), on_delivery=written,
            )  # fmt: skip

    def log(
        self,
        event: Event,
        record: SourceRecord,
        origin: Origin,
        count: int,
        at: int,
        **extra: Any,
    ) -> None:
        self.log_events([copy_event(event, record, origin, count, at, self._node, **extra)])

    def log_events(self, events: list[tuple[str, bytes]], durable: bool = True) -> None:
        """Add rendered delivery-log events (record id, value); a memory lease's wait as its
        records do."""
        if not (durable or self.txn.open or self._unwritten.full):
            self._unwritten.events += events
            return
        self._open()
        self._produce_events(events)

    def _produce_events(self, events: list[tuple[str, bytes]]) -> None:
        if events:  # handed to the producer a batch at a time (`foundation.plain_records`)
            self.txn.add_many(self._log_topic, events)

    def _open(self) -> None:
        """Begin the transaction, with what earlier memory-lease pops left unwritten first."""
        if not self.txn.open:
            self.txn.begin()
            self._carry()

    def _carry(self) -> None:
        records, events = self._unwritten.take()
        for record in records:
            self.record(record)
        self._produce_events(events)


def _noting(
    state: PopState, key: LedgerKey, held: tuple[list[Written], list[str]]
) -> Callable[[KafkaError | None, Message], None]:
    def written(error: KafkaError | None, message: Message) -> None:
        if error is None:
            state.wrote(key, held, message.partition(), message.offset())

    return written
