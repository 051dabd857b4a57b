"""The answers of ack calls made with a `request_id`, remembered for a while, per shard.

An ack that also produces (`revive.ack_produce`) may be sent again when its answer was lost: a
call with a `request_id` this shard answered within `WINDOW_MS` gets that answer again and
changes nothing. Each answer is an `AnswerRecord` in the transaction that made the call's
changes, so the shard's next leader (and its standbys) know it too: the record holds the replay
floor of its pop-state partition down until its window ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from revive.records import AnswerRecord

WINDOW_MS = 5 * 60_000  # as long as SQS remembers a FIFO queue's deduplication ids

CallKey = tuple[str, str]  # (group, request_id)


@dataclass
class Answered:
    digest: str  # what the call asked (`api.ack_produce`): the same id must ask the same
    at_ms: int
    answer: bytes  # JSON
    place: tuple[int, int] | None = None  # (pop-state partition, offset) of its record


class AnsweredCalls:
    def __init__(self) -> None:
        self._calls: dict[CallKey, Answered] = {}

    def remember(self, record: AnswerRecord) -> None:
        key = (record.group, record.request_id)
        self._calls[key] = Answered(record.digest, record.at_ms, record.answer)

    def placed(self, key: CallKey, partition: int, offset: int) -> None:
        """The record of `key`'s answer is at `partition`/`offset` of the pop-state topic."""
        answered = self._calls.get(key)
        if answered is not None:
            answered.place = (partition, offset)

    def find(self, key: CallKey, now_ms: int) -> Answered | None:
        """The answer of call `key` if it was answered within the window."""
        answered = self._calls.get(key)
        if answered is None or answered.at_ms + WINDOW_MS <= now_ms:
            return None
        return answered

    def floors(self, now_ms: int) -> dict[int, int]:
        """Per pop-state partition, the lowest record of an answer still remembered; answers
        whose window ended are forgotten."""
        self._calls = {k: a for k, a in self._calls.items() if a.at_ms + WINDOW_MS > now_ms}
        floors: dict[int, int] = {}
        for answered in self._calls.values():
            if answered.place is not None:
                partition, offset = answered.place
                floors[partition] = min(floors.get(partition, offset), offset)
        return floors

    def forget_below(self, floors: dict[int, int]) -> None:
        """A standby's: the leader's committed floors passed these answers' records."""
        self._calls = {
            key: answered
            for key, answered in self._calls.items()
            if answered.place is None or answered.place[1] >= floors.get(answered.place[0], 0)
        }

    def __len__(self) -> int:
        return len(self._calls)
