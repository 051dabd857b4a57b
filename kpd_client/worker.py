"""A worker loop on the sync client: pop, handle, ack or nack, and keep long handlers' leases."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kpd_client.client import KpdClient, PoppedMessage
from kpd_client.retry import KpdError


def run_worker(
    client: KpdClient,
    group: str,
    topic: str,
    handler: Callable[[PoppedMessage], list[dict[str, Any]] | None],
    *,
    invisible_ms: int = 30_000,
    batch: int = 10,
    wait_ms: int = 20_000,
    stop: threading.Event | None = None,
) -> None:
    """Pop and handle messages until `stop` is set.

    Success acks; an exception nacks (the group's backoff decides when it returns). A handler
    may return messages to produce (as `KpdClient.produce` takes them, each with its `topic`):
    they are written in the transaction of the ack, or not at all if the lease was lost
    meanwhile (the message then comes again). While a handler runs, its lease is extended every
    `invisible_ms / 3`, so a slow handler keeps the message invisible to other workers without
    picking a huge invisible time up front.
    """
    stop = stop or threading.Event()
    while not stop.is_set():
        for message in client.pop(group, topic, batch, invisible_ms, wait_ms):
            if stop.is_set():
                client.extend(group, [message.receipt], 0)  # hand it back at once
                continue
            done = threading.Event()
            keeper = threading.Thread(
                target=_keep_leased,
                args=(client, group, message.receipt, invisible_ms, done),
                daemon=True,
            )
            keeper.start()
            try:
                produce = handler(message)
            except Exception:
                succeeded = False
            else:
                succeeded = True
            finally:
                done.set()
                keeper.join()
            if succeeded:
                _ack(client, group, message.receipt, produce)
            else:
                client.nack(group, [message.receipt])


def _ack(client: KpdClient, group: str, receipt: str, produce: list[dict[str, Any]] | None) -> None:
    try:
        client.ack(group, [receipt], produce=produce or None)
    except KpdError as error:
        if error.code != "not_acked":  # the lease ended meanwhile: the message comes again
            raise


def _keep_leased(
    client: KpdClient, group: str, receipt: str, invisible_ms: int, done: threading.Event
) -> None:
    while not done.wait(invisible_ms / 3000):
        client.extend(group, [receipt], invisible_ms)
