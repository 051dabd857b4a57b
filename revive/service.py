"""The pop service while this sidecar leads: leases, acks, revive, retry and dead-letter.

One thread owns all pop state. HTTP handlers hand it requests through a queue and wait on
futures; the thread serves every request that arrived meanwhile in one Kafka transaction (group
commit), together with the revive of expired leases and the commit of each group's offsets, and
answers only after the commit. So a pop is answered only once its checkpoint record is durable,
an ack only once its ack record is, and a retry copy exists exactly when the delivery it replaces
is marked settled.

State records (`revive.records`) go to the pop-state topic; a new leader replays them to rebuild
the ledgers, so leases granted before a restart are honoured and acked messages never return.
"""

from __future__ import annotations

import base64
import queue
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from revive import metrics
from revive.copies import Origin, copy_headers, previous_deliveries, user_headers
from revive.fetcher import GroupFetcher, LaneKey, source_topic
from revive.ledger import ACKED, ACKED_LATE, OK, Outcome, PartitionLedger
from revive.reader import OffsetReader
from revive.receipt import InvalidReceipt, Receipt, ReceiptCodec
from revive.records import (
    AckRecord,
    CheckpointRecord,
    DeadlineRecord,
    InvalidStateRecord,
    StateRecord,
    apply,
    pack_batch,
    unpack_batch,
)
from sidecar.clock import now_ms
from sidecar.config import GroupSettings, Settings
from sidecar.delivery_log import Event, log_record
from sidecar.kafka_clients import state_consumer, transactional_producer
from sidecar.topics import TopicSpec, ensure_topics

log = structlog.get_logger(__name__)

IDLE_WAIT_S = 0.005  # how often the thread looks for new records when requests are parked
LedgerKey = tuple[str, str, int]  # (group, lane, partition)


@dataclass
class PopRequest:
    group: str
    topic: str
    max_messages: int
    invisible_ms: int
    wait_until_ms: int


@dataclass
class SettleRequest:
    """ack / nack / leases / reject: one kind, items of (receipt, argument)."""

    kind: str  # "ack" | "nack" | "leases" | "reject"
    group: str
    items: list[tuple[str, Any]]


@dataclass
class _Copy:
    """A message to copy once the transaction has its payload: retry, delayed retry or DLQ."""

    key: LedgerKey
    offset: int
    delivery_count: int
    dead_letter_reason: str | None
    delay_ms: int


@dataclass
class _Txn:
    open: bool = False
    groups: set[str] = field(default_factory=set)
    records: dict[str, list[bytes]] = field(default_factory=dict)  # ledger key -> state records
    copies: list[_Copy] = field(default_factory=list)
    answers: list[tuple[Future[Any], Any]] = field(default_factory=list)


class PopService:
    def __init__(
        self,
        settings: Settings,
        client_config: dict[str, Any],
        admin: Any,
        codec: ReceiptCodec,
    ) -> None:
        self._settings = settings
        self._node = settings.node_id
        self._config = client_config
        self._admin = admin
        self._codec = codec
        self._timeout_s = settings.kafka_timeout_ms / 1000
        self.state_topic = settings.state_topic("pop-state")
        self._queue: queue.Queue[tuple[Any, Future[Any]]] = queue.Queue()
        self._parked: list[tuple[PopRequest, Future[Any]]] = []
        self._fetchers: dict[str, GroupFetcher] = {}
        self._ledgers: dict[LedgerKey, PartitionLedger] = {}
        self._last_leased: dict[LedgerKey, int] = {}
        self._next_checkpoint = 1
        self._producer = transactional_producer(client_config, settings.state_topic("pop-leader"))
        self._reader = OffsetReader(client_config, self._timeout_s)
        self.dead_lettered: dict[str, int] = {}
        self._committed: dict[tuple[str, str, int], int] = {}  # last offsets sent per group

    # -- called from HTTP handlers (any thread) --------------------------------------------

    def submit(self, request: PopRequest | SettleRequest) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((request, future))
        return future

    # -- the service thread ----------------------------------------------------------------

    def start(self) -> None:
        """Fence older leaders' pop producers, then rebuild the ledgers from the state topic."""
        self._producer.init_transactions(self._timeout_s)
        records = _read_all(self._config, self.state_topic, self._timeout_s)
        for record in records:
            key = (record.group, record.topic, record.partition)
            ledger = self._ledgers.get(key)
            if isinstance(record, CheckpointRecord):
                if ledger is None:
                    ledger = self._ledgers[key] = PartitionLedger(record.offsets[0])
                self._last_leased[key] = record.offsets[-1]
                self._next_checkpoint = max(self._next_checkpoint, record.checkpoint_id + 1)
            if ledger is not None:
                apply(ledger, record)
        log.info("pop service started", ledgers=len(self._ledgers), records=len(records))

    def step(self) -> None:
        """Serve what arrived (waiting briefly if nothing did), revive, commit, answer."""
        requests = self._drain()
        txn = _Txn()
        for fetcher in self._fetchers.values():
            fetcher.fetch()
        for request, future in requests:
            try:
                if isinstance(request, PopRequest):
                    self._pop(request, future, txn)
                else:
                    txn.answers.append((future, self._settle(request, txn)))
            except Exception as error:  # a bad request must not stop the others
                future.set_exception(error)
        self._serve_parked(txn)
        self._revive(txn)
        if txn.open:
            self._copy(txn)
            self._write_records(txn)
            self._commit_offsets(txn)
            self._producer.commit_transaction(self._timeout_s)
        for future, answer in txn.answers:
            future.set_result(answer)

    def close(self) -> None:
        for _, future in [*self._parked, *self._drain(block=False)]:
            future.set_exception(RuntimeError("this sidecar stopped leading"))
        for fetcher in self._fetchers.values():
            fetcher.close()
        self._reader.close()
        self._producer.flush(1)

    def stats(self, group: str) -> dict[str, Any]:
        """Live numbers per topic (read from the HTTP thread: approximate by nature)."""
        fetcher = self._fetchers.get(group)
        topics: dict[str, Any] = {}
        if fetcher is None:
            return topics
        for topic in sorted(fetcher.topics - {fetcher.retry_topic}):
            in_flight = retrying = 0
            for (g, lane, _), ledger in list(self._ledgers.items()):
                if g == group and lane == topic:
                    in_flight += ledger.in_flight()
                elif g == group and lane == f"{fetcher.retry_topic}/{topic}":
                    retrying += ledger.in_flight()
            committed = fetcher.consumer.committed(
                [tp for tp in fetcher.assignment if tp.topic == topic], timeout=self._timeout_s
            )
            partitions = {}
            for tp in committed:
                _, high = fetcher.consumer.get_watermark_offsets(tp, timeout=self._timeout_s)
                done = max(tp.offset, 0)
                partitions[str(tp.partition)] = {"committed": tp.offset, "lag": high - done}
            topics[topic] = {
                "available": fetcher.available(topic, retries=False),
                "in_flight": in_flight + retrying,  # leased now, originals and retry copies
                "retrying": fetcher.available(topic, retries=True),  # copies waiting for a pop
                "partitions": partitions,
            }
        return {"topics": topics, "dead_lettered": self.dead_lettered.get(group, 0)}

    def _drain(self, block: bool = True) -> list[tuple[Any, Future[Any]]]:
        items = []
        try:
            wait = IDLE_WAIT_S if block else 0
            items.append(self._queue.get(timeout=wait) if wait else self._queue.get_nowait())
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return items

    def _open(self, txn: _Txn) -> None:
        if not txn.open:
            self._producer.begin_transaction()
            txn.open = True

    def _record(self, txn: _Txn, record: StateRecord) -> None:
        self._open(txn)
        key = f"{record.group}/{record.topic}/{record.partition}"
        txn.records.setdefault(key, []).append(record.to_bytes())
        txn.groups.add(record.group)

    def _write_records(self, txn: _Txn) -> None:
        """One state-topic record per ledger and transaction, keyed so a ledger stays ordered."""
        for key, encoded in txn.records.items():
            self._produce(self.state_topic, key.encode(), pack_batch(encoded))

    def _produce(self, topic: str, key: bytes | str | None, value: bytes | None, **kw: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **kw)
                return
            except BufferError:
                self._producer.poll(0.01)

    # -- pop -------------------------------------------------------------------------------

    def _fetcher(self, group: str, topic: str) -> GroupFetcher:
        fetcher = self._fetchers.get(group)
        group_settings = self._settings.group(group)
        if fetcher is None:
            assert group_settings.retry_topic and group_settings.dlq_topic
            ensure_topics(
                self._admin,
                [TopicSpec(group_settings.retry_topic), TopicSpec(group_settings.dlq_topic)],
                self._settings.topic_partitions,
                self._settings.topic_replication,
                self._timeout_s,
            )
            fetcher = GroupFetcher(
                group,
                group_settings.retry_topic,
                self._config,
                lambda lane: self._last_leased.get((group, *lane), -1),
            )
            self._fetchers[group] = fetcher
        if topic not in fetcher.topics:
            fetcher.add_topic(topic, self._timeout_s)
        return fetcher

    def _pop(self, request: PopRequest, future: Future[Any], txn: _Txn) -> None:
        fetcher = self._fetcher(request.group, request.topic)
        fetcher.fetch()
        messages = self._lease(request, fetcher, txn)
        if messages or request.wait_until_ms <= now_ms():
            txn.answers.append((future, messages))
        else:
            self._parked.append((request, future))

    def _serve_parked(self, txn: _Txn) -> None:
        still = []
        for request, future in self._parked:
            messages = self._lease(request, self._fetchers[request.group], txn)
            if messages or request.wait_until_ms <= now_ms():
                txn.answers.append((future, messages))
            else:
                still.append((request, future))
        self._parked = still

    def _lease(self, request: PopRequest, fetcher: GroupFetcher, txn: _Txn) -> list[dict[str, Any]]:
        taken = fetcher.take(request.topic, request.max_messages)
        if not taken:
            return []
        now = now_ms()
        deadline = now + request.invisible_ms
        by_lane: dict[LaneKey, list[Message]] = {}
        for lane, message in taken:
            by_lane.setdefault(lane, []).append(message)
        out = []
        for (lane, partition), messages in by_lane.items():
            key = (request.group, lane, partition)
            checkpoint_id = self._next_checkpoint
            self._next_checkpoint += 1
            counts = [previous_deliveries(m) + 1 for m in messages]
            record = CheckpointRecord(
                request.group,
                lane,
                partition,
                checkpoint_id,
                tuple(m.offset() for m in messages),
                tuple(counts),
                deadline,
                now,
            )
            ledger = self._ledgers.get(key)
            if ledger is None:
                ledger = self._ledgers[key] = PartitionLedger(messages[0].offset())
            apply(ledger, record)
            self._last_leased[key] = messages[-1].offset()
            self._record(txn, record)
            for message, count in zip(messages, counts, strict=True):
                receipt = Receipt(
                    request.group, lane, partition, message.offset(), checkpoint_id, count
                )
                origin = Origin.of(message)
                out.append(
                    _message_json(message, origin, self._codec.encode(receipt), count, deadline)
                )
                self._log(Event.DELIVERED, message, origin, count, now, group=request.group)
        metrics.POPPED.inc(len(out))
        return out

    # -- ack / nack / leases / reject -------------------------------------------------------

    def _settle(self, request: SettleRequest, txn: _Txn) -> list[dict[str, Any]]:
        results = []
        group = self._settings.group(request.group)
        now = now_ms()
        for text, argument in request.items:
            try:
                receipt = self._codec.decode(text, group=request.group)
            except InvalidReceipt as error:
                results.append({"receipt": text, "status": "invalid", "detail": error.reason})
                continue
            key = (request.group, receipt.topic, receipt.partition)
            ledger = self._ledgers.get(key)
            if ledger is None:
                results.append({"receipt": text, "status": "invalid"})
                continue
            result = self._settle_one(request.kind, group, key, ledger, receipt, argument, now, txn)
            results.append({"receipt": text, **result})
        return results

    def _settle_one(
        self,
        kind: str,
        group: GroupSettings,
        key: LedgerKey,
        ledger: PartitionLedger,
        receipt: Receipt,
        argument: Any,
        now: int,
        txn: _Txn,
    ) -> dict[str, Any]:
        cp, offset = receipt.checkpoint_id, receipt.offset
        if kind == "ack":
            status = ledger.ack(cp, offset, now)
            if status in (ACKED, ACKED_LATE):
                self._record(txn, AckRecord(*key, cp, offset, Outcome.ACKED, now))
                metrics.ACKED.inc()
            return {"status": status}
        if kind == "leases":
            until = now + int(argument)
            status = ledger.change_deadline(cp, offset, until, now)
            if status != OK:
                return {"status": status}
            self._record(txn, DeadlineRecord(*key, cp, offset, until, now))
            return {"status": "ok", "invisible_until_ms": until}
        if kind == "reject":
            reason = f"rejected: {argument}" if argument else "rejected"
        elif receipt.delivery_count >= group.max_deliveries:
            reason = f"max deliveries ({group.max_deliveries}) reached"
        else:
            reason = None
        outcome = Outcome.REQUEUED if reason is None else Outcome.DEAD_LETTERED
        status = ledger.settle(cp, offset, outcome)
        if status != OK:
            return {"status": status}
        self._record(txn, AckRecord(*key, cp, offset, outcome, now))
        delay = 0
        if kind == "nack" and reason is None:
            # Without delay_ms, the group's backoff for this delivery (the last one repeats).
            backoff = group.backoff_ms[min(receipt.delivery_count, len(group.backoff_ms)) - 1]
            delay = backoff if argument is None else int(argument)
        txn.copies.append(_Copy(key, offset, receipt.delivery_count, reason, delay))
        return {"status": "requeued" if reason is None else "dead_lettered"}

    # -- revive ----------------------------------------------------------------------------

    def _revive(self, txn: _Txn) -> None:
        """Leases that ended without an ack: available again at once, or dead-lettered."""
        now = now_ms()
        for key, ledger in self._ledgers.items():
            group = self._settings.group(key[0])
            for cp, offset, count in ledger.expired(now):
                reason = (
                    f"max deliveries ({group.max_deliveries}) reached"
                    if count >= group.max_deliveries
                    else None
                )
                outcome = Outcome.REQUEUED if reason is None else Outcome.DEAD_LETTERED
                if ledger.settle(cp, offset, outcome) != OK:
                    continue
                self._record(txn, AckRecord(*key, cp, offset, outcome, now))
                txn.copies.append(_Copy(key, offset, count, reason, 0))

    def _copy(self, txn: _Txn) -> None:
        if not txn.copies:
            return
        wanted = {(source_topic(c.key[1]), c.key[2], c.offset) for c in txn.copies}
        found = self._reader.read(wanted)
        now = now_ms()
        for copy in txn.copies:
            group_name, lane, partition = copy.key
            group = self._settings.group(group_name)
            message = found.get((source_topic(lane), partition, copy.offset))
            if message is None:
                log.warning("record to copy is gone", lane=lane, offset=copy.offset)
                continue
            origin = Origin.of(message)
            if copy.dead_letter_reason is not None:
                headers = copy_headers(message, copy.delivery_count, copy.dead_letter_reason)
                assert group.dlq_topic is not None
                self._produce(group.dlq_topic, message.key(), message.value(), headers=headers)
                self._log(
                    Event.DEAD_LETTERED,
                    message,
                    origin,
                    copy.delivery_count,
                    now,
                    group=group_name,
                    reason=copy.dead_letter_reason,
                )
                self.dead_lettered[group_name] = self.dead_lettered.get(group_name, 0) + 1
                metrics.DEAD_LETTERED.inc()
                continue
            headers = copy_headers(message, copy.delivery_count)
            assert group.retry_topic is not None
            if copy.delay_ms > 0:  # through the delay service: due later on the retry topic
                control = [
                    ("kpd-target", group.retry_topic.encode()),
                    ("kpd-delay-ms", str(copy.delay_ms).encode()),
                ]
                self._produce(
                    self._settings.buffer_topic,
                    message.key(),
                    message.value(),
                    headers=[*headers, *control],
                )
            else:
                self._produce(group.retry_topic, message.key(), message.value(), headers=headers)
            self._log(
                Event.RETRIED,
                message,
                origin,
                copy.delivery_count,
                now,
                group=group_name,
                due_ms=now + copy.delay_ms,
            )
            metrics.RETRIED.inc()

    def _log(
        self, event: Event, message: Message, origin: Origin, count: int, at: int, **extra: Any
    ) -> None:
        record_id = f"{origin.topic}:{origin.partition}:{origin.offset}"
        extra.setdefault("due_ms", None)
        value = log_record(
            event,
            record_id,
            origin.topic,
            at_ms=at,
            enqueued_ms=message.timestamp()[1],
            node=self._node,
            delivery_count=count,
            partition=origin.partition,
            offset=origin.offset,
            **extra,
        )
        self._produce(self._settings.delivery_log_topic, record_id, value)

    def _commit_offsets(self, txn: _Txn) -> None:
        """Each touched group's committed offset = the low watermark of settled messages."""
        for group in txn.groups:
            fetcher = self._fetchers.get(group)
            if fetcher is None:
                continue
            offsets = []
            for tp in fetcher.assignment:
                cursor = fetcher.cursor(tp.topic, tp.partition)
                if cursor < 0:
                    continue
                marks = [cursor]
                for (g, lane, p), ledger in self._ledgers.items():
                    if g == group and p == tp.partition and source_topic(lane) == tp.topic:
                        floor = self._last_leased.get((g, lane, p), -1) + 1
                        marks.append(ledger.low_watermark(max(cursor, floor)))
                mark = min(marks)
                if self._committed.get((group, tp.topic, tp.partition)) != mark:
                    offsets.append(TopicPartition(tp.topic, tp.partition, mark))
                    self._committed[(group, tp.topic, tp.partition)] = mark
            if offsets:  # only when a watermark moved: each send costs a broker round trip
                self._producer.send_offsets_to_transaction(
                    offsets, fetcher.consumer.consumer_group_metadata(), self._timeout_s
                )


def _message_json(
    message: Message, origin: Origin, receipt: str, count: int, invisible_until: int
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "receipt": receipt,
        "topic": origin.topic,
        "partition": origin.partition,
        "offset": origin.offset,
        "key": _text(message.key()),
        "headers": {n: v.decode("utf-8", "replace") for n, v in user_headers(message)},
        "timestamp_ms": message.timestamp()[1],
        "delivery_count": count,
        "invisible_until_ms": invisible_until,
    }
    value = message.value()
    text = _text(value)
    if value is not None and text is None:
        body["value_b64"] = base64.b64encode(value).decode()
    else:
        body["value"] = text
    return body


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_all(config: dict[str, Any], topic: str, timeout_s: float) -> list[StateRecord]:
    """Every committed state record of `topic`, from the beginning to its current end."""
    consumer = state_consumer(config, "kpd-pop-replay")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions]
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=timeout_s)[1]
            for tp in partitions
        }
        consumer.assign(partitions)
        records: list[StateRecord] = []

        def done() -> bool:
            positions = consumer.position(partitions)
            return all(max(p.offset, 0) >= ends[p.partition] for p in positions)

        while not done():
            for message in consumer.consume(num_messages=5_000, timeout=0.1):
                if message.error() is not None or not message.value():
                    continue
                try:
                    records.extend(unpack_batch(message.value()))
                except InvalidStateRecord as error:  # not written by kpd: never fatal
                    log.warning(
                        "skipping a foreign pop-state record",
                        offset=message.offset(),
                        error=str(error),
                    )
        return records
    finally:
        consumer.close()
