"""Request and response bodies of the pop-group calls (`api.pop`).

Receipts are any JSON string: the receipt codec decides what is valid, so an empty, oversized or
garbage receipt is a per-item `invalid` and the valid receipts of the same call are still settled
(the body limit bounds the total). The response models document the answers; the handlers
serialise plain dicts with orjson for speed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from api.message_body import MessageIn
from api.request_body import RequestBody
from foundation.config import TOPIC_PATTERN, GroupSettings

MAX_ITEMS = 1000
MAX_INVISIBLE_MS = 43_200_000
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class PopBody(RequestBody):
    max_messages: int = Field(10, ge=1, le=1000)
    invisible_ms: int | None = Field(None, ge=1000, le=MAX_INVISIBLE_MS)
    wait_ms: int = Field(0, ge=0, le=20_000)


class AckBody(RequestBody):
    receipts: list[str] = Field(min_length=1, max_length=MAX_ITEMS)


class ProduceItem(MessageIn):
    """A message an ack call produces: as in `POST /v1/topics/{topic}/messages`, with its topic."""

    topic: str = Field(pattern=TOPIC_PATTERN)


class AckProduceBody(AckBody):
    """An ack; with `produce`, the acks and the records commit in one transaction or nothing
    changes (`api.ack_produce`). `request_id` (only with `produce`) makes a retried call answer
    as the first did."""

    produce: list[ProduceItem] | None = Field(None, min_length=1, max_length=MAX_ITEMS)
    request_id: str | None = Field(None, pattern=REQUEST_ID_PATTERN)

    @model_validator(mode="after")
    def _with_produce(self) -> AckProduceBody:
        if self.request_id is not None and self.produce is None:
            raise ValueError("request_id is for a call with produce")
        if self.produce is not None and len(set(self.receipts)) < len(self.receipts):
            raise ValueError("with produce, each receipt may be given once")
        return self


class NackItem(RequestBody):
    receipt: str
    delay_ms: int | None = Field(None, ge=0, le=MAX_INVISIBLE_MS)


class NackBody(RequestBody):
    items: list[NackItem] = Field(min_length=1, max_length=MAX_ITEMS)


class LeaseItem(RequestBody):
    receipt: str
    invisible_ms: int = Field(ge=0, le=MAX_INVISIBLE_MS)


class LeaseBody(RequestBody):
    items: list[LeaseItem] = Field(min_length=1, max_length=MAX_ITEMS)


class RejectItem(RequestBody):
    receipt: str
    reason: str | None = Field(None, max_length=1000)


class RejectBody(RequestBody):
    items: list[RejectItem] = Field(min_length=1, max_length=MAX_ITEMS)


class PoppedMessage(BaseModel):
    receipt: str
    topic: str
    partition: int
    offset: int
    key: str | None
    value: str | None = Field(None, description="the value when it is UTF-8 text")
    value_b64: str | None = Field(None, description="the value in base64 when it is not text")
    headers: dict[str, str]
    timestamp_ms: int
    delivery_count: int
    invisible_until_ms: int


class PopAnswer(BaseModel):
    messages: list[PoppedMessage]


SettleStatus = Literal[
    "acked",
    "acked_late",
    "already_acked",
    "superseded",
    "invalid",
    "requeued",
    "dead_lettered",
    "ok",
    "unavailable",
]


class SettleResult(BaseModel):
    receipt: str
    status: SettleStatus
    invisible_until_ms: int | None = Field(None, description="leases: the new lease end")
    detail: str | None = Field(None, description="why a receipt is invalid or unavailable")
    code: str | None = Field(
        None, description="unavailable: the problem code of its shard (leader_starting, ...)"
    )
    retry_after_ms: int | None = Field(
        None, description="unavailable: when to send the receipt again"
    )


class ProducedResult(BaseModel):
    topic: str
    status: Literal["enqueued", "scheduled"]
    id: str | None = Field(None, description="scheduled: the schedule's id")
    deliver_at_ms: int | None = Field(None, description="scheduled: when it is due")


class SettleAnswer(BaseModel):
    results: list[SettleResult] = Field(description="one per receipt, in request order")
    produced: list[ProducedResult] | None = Field(
        None, description="ack with produce: one per record, in request order"
    )


class PartitionStats(BaseModel):
    committed: int
    lag: int


class TopicStats(BaseModel):
    available: int
    in_flight: int
    retrying: int = Field(description="retry copies fetched and waiting for a pop")
    partitions: dict[str, PartitionStats]


class GroupStats(BaseModel):
    group: str
    config: GroupSettings
    node: str
    topics: dict[str, TopicStats] = Field(
        default_factory=dict, description="empty until the group's first pop"
    )
    dead_lettered: int | None = None
