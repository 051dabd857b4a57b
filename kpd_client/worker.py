"""A worker loop on the sync client: pop, handle, ack or nack, and keep long handlers' leases."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kpd_client.client import KpdClient, PoppedMessage


def run_worker(
    client: KpdClient,
    group: str,
    topic: str,
    handler: Callable[[PoppedMessage], None],
    *,
    invisible_ms: int = 30_000,
    batch: int = 10,
    wait_ms: int = 20_000,
    stop: threading.Event | None = None,
) -> None:
    """Pop and handle messages until `stop` is set.

    Success acks; an exception nacks (the group's backoff decides when it returns). While a
    handler runs, its lease is extended every `invisible_ms / 3`, so a slow handler keeps the
    message invisible to other workers without picking a huge invisible time up front.
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
                handler(message)
            except Exception:
                succeeded = False
            else:
                succeeded = True
            finally:
                done.set()
                keeper.join()
            if succeeded:
                client.ack(group, [message.receipt])
            else:
                client.nack(group, [message.receipt])


def _keep_leased(
    client: KpdClient, group: str, receipt: str, invisible_ms: int, done: threading.Event
) -> None:
    while not done.wait(invisible_ms / 3000):
        client.extend(group, [receipt], invisible_ms)
