"""`POST /v1/groups/{group}/ack` with `produce`: acks and records in one transaction, or nothing.

The call is checked whole before anything changes: each record as `POST /v1/topics/{topic}/
messages` checks it (size, delay, a topic that exists and is not kpd's), the receipts given once
each and all of one shard, since one Kafka transaction is one shard's producer's (a call whose
receipts span shards answers 422 `receipts_span_shards`: ack them in one call per shard). The
shard's owner serves it (`revive.ack_produce`), here or forwarded whole: every receipt acked
and every record written, or 409 `not_acked` with what each receipt would answer.
"""

from __future__ import annotations

import hashlib

import orjson
from ulid import ULID

from api.message_body import check_size, check_topic_name, due_ms, schedule_headers
from api.node import Node
from api.pop_bodies import AckProduceBody, ProduceItem
from api.pop_calls import Answer, Caller, json_bytes
from api.refused_topics import refused_topic
from api.schedules import buffer_partition
from cluster.routing.forwarding import forward, segment
from cluster.routing.shard_answers import shard_answer, shard_route
from cluster.routing.topic_lookups import topic_exists
from foundation.clock import now_ms
from foundation.problem import Problem
from revive.ack_produce import AckProduceAnswer
from revive.lanes import source_topic
from revive.receipt import InvalidReceipt, Receipt
from revive.requests import AckProduceRequest, Produced


async def ack_produce_call(node: Node, group: str, body: AckProduceBody, caller: Caller) -> Answer:
    assert body.produce is not None  # `api.pop` sends other acks to `settle_call`
    dues = await _checked(node, group, body.produce)
    items: list[tuple[str, Receipt | None]] = []
    shards = set()
    for text in body.receipts:
        try:
            receipt = node.codec.decode(text, group=group)
        except InvalidReceipt:
            items.append((text, None))
            continue
        items.append((text, receipt))
        topic = source_topic(receipt.topic)
        shards.add(node.shard_map.of_lane(group, topic, receipt.partition))
    if not shards:
        raise _not_acked([{"receipt": text, "status": "invalid"} for text, _ in items])
    if len(shards) > 1:
        raise Problem(
            422, "receipts_span_shards",
            f"the receipts belong to {len(shards)} shards; one transaction holds one shard's:"
            " ack them in one call per shard",
        )  # fmt: skip
    route = shard_route(node, shards.pop(), caller.forwarded, node.routes())
    if isinstance(route, str):
        path = f"/v1/groups/{segment(group)}/ack"
        return Answer(json_bytes(await forward(node, "ack", route, path, _body(body))))
    produce = [await _produced(node, m, due) for m, due in zip(body.produce, dues, strict=True)]
    request = AckProduceRequest(group, items, produce, body.request_id, _digest(body))
    answer: AckProduceAnswer = await shard_answer(route.settle(request))
    if answer.outcome == "not_acked":
        raise _not_acked(answer.results)
    if answer.outcome == "request_id_reused":
        raise Problem(
            422, "request_id_reused",
            f"request_id {body.request_id!r} was used by another call in the last minutes",
        )  # fmt: skip
    return Answer(json_bytes({"results": answer.results, "produced": answer.produced}))


async def _checked(node: Node, group: str, messages: list[ProduceItem]) -> list[int | None]:
    """Each record's due time (None: produced at once), once all of them pass the checks."""
    settings, now = node.settings, now_ms()
    dues = []
    for index, message in enumerate(messages):
        field = f"produce.{index}"
        dues.append(due_ms(field, message, now, settings.max_delay_ms))
        check_size(field, message, settings.max_record_bytes)
        check_topic_name(f"body.{field}.topic", message.topic)
    for topic in dict.fromkeys(message.topic for message in messages):
        refused = refused_topic(node, topic, group)
        if refused is not None:
            raise Problem(403, *refused)
        if not await topic_exists(node, topic):
            raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
    return dues


async def _produced(node: Node, message: ProduceItem, due: int | None) -> Produced:
    key, value = message.key_bytes(), message.payload()
    if due is None:
        answer = {"topic": message.topic, "status": "enqueued"}
        return Produced(message.topic, key, value, message.header_list(), None, answer)
    schedule_id = message.id or str(ULID())
    headers = schedule_headers(message, message.topic, due, schedule_id)
    partition = await buffer_partition(node, schedule_id)
    answer = {"topic": message.topic, "status": "scheduled", "id": schedule_id}
    answer["deliver_at_ms"] = due
    return Produced(node.settings.buffer_topic, key, value, headers, partition, answer)


def _not_acked(results: list[dict[str, object]]) -> Problem:
    return Problem(
        409, "not_acked",
        "not every receipt would be acked: nothing was acked or produced", results=results,
    )  # fmt: skip


def _body(body: AckProduceBody) -> dict[str, object]:
    return body.model_dump(exclude_none=True)


def _digest(body: AckProduceBody) -> str:
    """What the call asks, so that a retry of it is told from another call with its id."""
    asked = [body.receipts, [m.model_dump(exclude_none=True) for m in body.produce or []]]
    return hashlib.sha256(orjson.dumps(asked, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
