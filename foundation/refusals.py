"""What the broker's refusal of a record in a transaction means, and which records it blames.

A refusal for what a record is (too large for its topic, a topic that may not be written or does
not exist) is a *verdict* on that record (docs/principles.md, 6); a purge is only what an abort does
to the records still queued, never a verdict (`foundation.transactions`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from confluent_kafka import KafkaError

VERDICTS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.POLICY_VIOLATION,
    }
)
PURGES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


SIZE_VERDICTS = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG_SIZE}
)
RECORD_FRAMING_BYTES = 100  # a record's share of its batch: batch header, varints, attributes


@dataclass(frozen=True)
class Refusal:
    reason: str
    topic: str
    code: int
    size: int  # key + value + headers of the refused record

    @classmethod
    def of(cls, topic: str, error: KafkaError, size: int) -> Refusal:
        return cls(f"cannot write to {topic!r}: {error.str()}", topic, error.code(), size)


class RecordsRefused(Exception):
    """The broker (or the client) refused these tagged records; the transaction was aborted."""

    def __init__(self, refused: dict[Hashable, Refusal]) -> None:
        reasons = [r.reason for r in refused.values()][:3]
        super().__init__(f"{len(refused)} record(s) refused: {reasons}")
        self.refused = refused

    def judge(
        self, topic_limit: Callable[[str], int], batch_bytes: int
    ) -> tuple[dict[Hashable, str], int | None]:
        """(records to blame, with why; a smaller batch size if batches were the trouble).

        The broker applies `max.message.bytes` to a whole batch, so a size refusal also hits
        innocent records sent with the culprit: only records bigger than the topic's limit
        (asked of `topic_limit`) are to blame. If none is, the batch was too big: the caller
        sends smaller batches. Any other refusal (not allowed, no such topic) blames each
        record it names.
        """
        blamed = {t: r.reason for t, r in self.refused.items() if r.code not in SIZE_VERDICTS}
        by_topic: dict[str, list[tuple[Hashable, Refusal]]] = {}
        for tag, refusal in self.refused.items():
            if refusal.code in SIZE_VERDICTS:
                by_topic.setdefault(refusal.topic, []).append((tag, refusal))
        smaller: int | None = None
        for topic, refused in by_topic.items():
            limit = topic_limit(topic)
            over = [(t, r) for t, r in refused if r.size + RECORD_FRAMING_BYTES > limit]
            if not over and batch_bytes + RECORD_FRAMING_BYTES > limit:
                smaller = min(smaller or limit, limit - RECORD_FRAMING_BYTES)
                continue
            # Nothing else explains the refusal: the largest record is the one to settle.
            for tag, refusal in over or [max(refused, key=lambda item: item[1].size)]:
                blamed[tag] = f"{refusal.reason} (record of {refusal.size} bytes, limit {limit})"
        return blamed, smaller


class RefusalUnknown(Exception):
    """The transaction failed and was aborted while its tagged records went untracked: redo the
    step tracked to learn which record, if any, the broker refused."""
