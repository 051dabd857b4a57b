"""What each client verb of `kpd` (`kpd_client.cli`) does: its calls to the sidecar, and what it
prints: one JSON line per result on stdout (`groups`: a table), a tally of what was not done on
stderr. Each returns its exit code."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import sys
from collections import Counter
from typing import Any

from kpd_client.cli_messages import (
    UsageError,
    batches,
    message_from_flags,
    spooled_stdin,
    stdin_lines,
)
from kpd_client.cli_table import group_table
from kpd_client.client import KpdClient, PoppedMessage
from kpd_client.retry import KpdError

DONE, FAILED, USAGE = 0, 1, 2  # the exit codes `kpd_client.cli` names
MAX_ITEMS = 1000  # receipts per call (the API's bound)
# Per-item statuses that mean "what you asked for happened" (docs/reference.md: Command line).
SUCCEEDED = {
    "ack": {"acked", "acked_late", "already_acked"},
    "nack": {"requeued", "dead_lettered"},
    "reject": {"dead_lettered"},
    "leases": {"ok"},
}


def produce(client: KpdClient, args: argparse.Namespace) -> int:
    topic = args.topic
    if args.value is not None:
        message = message_from_flags(
            args.value, args.key, args.header, args.delay_ms, args.deliver_at, args.id
        )
        return _report_produced(client.produce(topic, [message]))
    flags = [
        "--" + name.replace("_", "-")
        for name in ("key", "header", "delay_ms", "deliver_at", "id")
        if getattr(args, name) not in (None, [])
    ]
    if flags:
        raise UsageError(f"{', '.join(flags)} need --value; stdin lines carry their own fields")
    if sys.stdin.isatty():
        raise UsageError("give --value, or pipe one JSON message per line on stdin")
    failed = sent = 0
    with spooled_stdin(sys.stdin.buffer) as lines:
        for batch in batches(lines):
            try:
                results = client.produce(topic, batch)
            except KpdError:
                print(f"kpd: the first {sent} message(s) were sent, the rest not", file=sys.stderr)
                raise
            failed += _report_produced(results)
            sent += len(batch)
    return FAILED if failed else DONE


def _report_produced(results: list[dict[str, Any]]) -> int:
    for result in results:
        _emit(result)
    errors = Counter(str(r.get("code")) for r in results if r.get("status") == "error")
    if errors:
        print(
            f"kpd: {sum(errors.values())} message(s) not produced: {_tally(errors)}",
            file=sys.stderr,
        )
    return FAILED if errors else DONE


def pop(client: KpdClient, args: argparse.Namespace) -> int:
    group, topic = args.group, args.topic
    for message in client.pop(group, topic, args.max, args.invisible_ms, args.wait_ms):
        _emit(_popped_json(message))
    return DONE


def _popped_json(message: PoppedMessage) -> dict[str, Any]:
    """The API's message shape: `value` when it is UTF-8 text, else `value_b64`."""
    fields = dataclasses.asdict(message)
    value = fields.pop("value")
    try:
        fields["value"] = None if value is None else value.decode()
    except UnicodeDecodeError:
        fields["value_b64"] = base64.b64encode(value).decode()
    return fields


def settle(client: KpdClient, args: argparse.Namespace) -> int:
    group = args.group
    receipts = _receipts(args.receipts)
    call: str = args.call
    wanted = SUCCEEDED[call]
    not_done: Counter[str] = Counter()
    for start in range(0, len(receipts), MAX_ITEMS):
        chunk = receipts[start : start + MAX_ITEMS]
        if call == "ack":
            results = client.ack(group, chunk)
        elif call == "nack":
            results = client.nack(group, chunk, args.delay_ms)
        elif call == "reject":
            results = client.reject(group, chunk, args.reason)
        else:
            results = client.extend(group, chunk, args.invisible_ms)
        for result in results:
            _emit(result)
            if result.get("status") not in wanted:
                not_done[str(result.get("status"))] += 1
    if not_done:
        print(
            f"kpd: {args.verb_name} failed for {sum(not_done.values())} of {len(receipts)}"
            f" receipt(s): {_tally(not_done)}",
            file=sys.stderr,
        )
    return FAILED if not_done else DONE


def _receipts(given: list[str]) -> list[str]:
    """The receipts named; `-` stands for one receipt per stdin line."""
    receipts: list[str] = []
    for receipt in given:
        if receipt == "-":
            receipts += [line for _, line in stdin_lines(sys.stdin.buffer)]
        elif receipt:
            receipts.append(receipt)
        else:
            raise UsageError("a receipt is empty")
    if not receipts:
        raise UsageError("no receipts given (stdin was empty)")
    return receipts


def schedules(client: KpdClient, args: argparse.Namespace) -> int:
    schedule_id = args.id
    if args.action == "get":
        _emit(client.schedule(schedule_id))
    else:
        client.cancel(schedule_id)
        _emit({"id": args.id, "state": "cancelled"})
    return DONE


def redrive(client: KpdClient, args: argparse.Namespace) -> int:
    _emit(client.redrive(args.group, args.max, args.topic))
    return DONE


def seek(client: KpdClient, args: argparse.Namespace) -> int:
    for position in client.seek(args.group, args.topic, args.to, args.time_ms):
        _emit(position)
    return DONE


def delete_group(client: KpdClient, args: argparse.Namespace) -> int:
    _emit({"group": args.group, "deleted_topics": client.delete_group(args.group, args.topics)})
    return DONE


def groups(client: KpdClient, args: argparse.Namespace) -> int:
    stats = client.group(args.group)
    if args.json:
        _emit(stats)
    else:
        print(group_table(stats))
    return DONE


def _emit(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False))


def _tally(counts: Counter[str]) -> str:
    return ", ".join(f"{name}: {count}" for name, count in counts.most_common())
