"""`kpd` client verbs: talk to a running sidecar over HTTP.

    kpd produce TOPIC --value V [--key K] [--header k=v] [--delay-ms N | --deliver-at T] [--id ID]
    kpd produce TOPIC < messages.jsonl
    kpd pop GROUP TOPIC [--max N] [--wait-ms N] [--invisible-ms N]
    kpd ack|nack|reject GROUP RECEIPT...      kpd extend GROUP RECEIPT... --invisible-ms N
    kpd schedules get|cancel ID               kpd groups GROUP [--json]
    kpd redrive GROUP [--max N] [--topic TOPIC]
    kpd seek GROUP TOPIC --to earliest|latest | --time-ms T
    kpd groups delete GROUP [--topics]

Results go to stdout (JSON lines; `groups` prints a table), errors to stderr. Exit codes: 0 all
done; 1 kpd answered an error, could not be reached, or an item was not done (a per-item status
other than success); 2 bad usage (nothing was sent).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

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

DONE, FAILED, USAGE = 0, 1, 2
MAX_ITEMS = 1000  # receipts per call (the API's bound)
# Per-item statuses that mean "what you asked for happened" (docs/reference.md: Command line).
SUCCEEDED = {
    "ack": {"acked", "acked_late", "already_acked"},
    "nack": {"requeued", "dead_lettered"},
    "reject": {"dead_lettered"},
    "leases": {"ok"},
}
Verb = Callable[[KpdClient, argparse.Namespace], int]


def add_verbs(commands: Any) -> None:
    """Add the client verbs to `kpd`'s sub-command parsers (an argparse subparsers action)."""
    url = argparse.ArgumentParser(add_help=False)
    url.add_argument(
        "--url", help="sidecar URL (default: $KPD_URL, else the configured KPD_HTTP_HOST/PORT)"
    )

    def verb(name: str, function: Verb, description: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, parents=[url], help=description)
        parser.set_defaults(verb=function)
        return parser

    produce = verb("produce", _produce, "produce one message, or JSON lines from stdin")
    produce.add_argument("topic", type=_text)
    produce.add_argument("--value", help="the message value (text); without it, read stdin")
    produce.add_argument("--key")
    produce.add_argument("--header", action="append", default=[], metavar="NAME=VALUE")
    due = produce.add_mutually_exclusive_group()
    due.add_argument("--delay-ms", type=_count)
    due.add_argument("--deliver-at", metavar="ISO|MS", help="epoch ms or ISO-8601 with a zone")
    produce.add_argument("--id", help="schedule id (with --delay-ms or --deliver-at)")

    pop = verb("pop", _pop, "lease messages; one JSON line each, receipt included")
    pop.add_argument("group", type=_text)
    pop.add_argument("topic", type=_text)
    pop.add_argument("--max", type=_count, default=10, help="messages (1..1000, default 10)")
    pop.add_argument("--wait-ms", type=_count, default=0, help="long poll (0..20000)")
    pop.add_argument("--invisible-ms", type=_count, help="lease (default: the group's)")

    for name, call, description in (
        ("ack", "ack", "ack deliveries"),
        ("nack", "nack", "hand deliveries back (retry after --delay-ms or the backoff)"),
        ("reject", "reject", "dead-letter deliveries now"),
        ("extend", "leases", "set the lease of deliveries (--invisible-ms 0: visible now)"),
    ):
        settle = verb(name, _settle, description)
        settle.set_defaults(call=call, verb_name=name)
        settle.add_argument("group", type=_text)
        settle.add_argument("receipts", nargs="+", metavar="RECEIPT", help="or - to read stdin")
        if call == "nack":
            settle.add_argument("--delay-ms", type=_count)
        elif call == "reject":
            settle.add_argument("--reason")
        elif call == "leases":
            settle.add_argument("--invisible-ms", type=_count, required=True)

    schedules = verb("schedules", _schedules, "read or cancel a delayed message")
    schedules.add_argument("action", choices=["get", "cancel"])
    schedules.add_argument("id", type=_text)

    redrive = verb("redrive", _redrive, "send a group's dead letters back to it")
    redrive.add_argument("group", type=_text)
    redrive.add_argument("--max", type=_count, default=10_000, help="at most (1..100000)")
    redrive.add_argument("--topic", type=_text, help="only dead letters of this topic")

    seek = verb("seek", _seek, "move a group's position in a topic (--to latest purges)")
    seek.add_argument("group", type=_text)
    seek.add_argument("topic", type=_text)
    target = seek.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", choices=["earliest", "latest"])
    target.add_argument("--time-ms", type=_count, help="the first message at or after (epoch ms)")

    groups = verb("groups", _groups, "a pop group's config and live stats")
    groups.add_argument("group", type=_text)
    groups.add_argument("--json", action="store_true", help="the API's JSON instead of a table")


def groups_delete_parser() -> argparse.ArgumentParser:
    """`kpd groups delete GROUP`: read apart from `kpd groups GROUP` (a group's stats)."""
    parser = argparse.ArgumentParser(
        prog="kpd groups delete", description="forget a pop group: leases, positions, retries"
    )
    parser.add_argument("group", type=_text)
    parser.add_argument("--topics", action="store_true", help="also delete its retry and DLQ")
    parser.add_argument("--url", help="sidecar URL (default: $KPD_URL, else the configured one)")
    parser.set_defaults(verb=_delete_group)
    return parser


def run_verb(args: argparse.Namespace, default_url: Callable[[], str]) -> int:
    """Run a verb added by `add_verbs`; its exit code. `default_url` is asked only when neither
    --url nor KPD_URL is given."""
    url = args.url or os.environ.get("KPD_URL") or ""
    try:
        url = _checked_url(url or default_url())
        with KpdClient(url, token=os.environ.get("KPD_API_TOKEN") or None) as client:
            verb: Verb = args.verb
            return verb(client, args)
    except UsageError as error:
        print(f"kpd: {error}", file=sys.stderr)
        return USAGE
    except KpdError as error:
        _print_problem(error)
        return FAILED
    except httpx.HTTPError as error:
        print(f"kpd: cannot reach kpd at {url}: {error or type(error).__name__}", file=sys.stderr)
        return FAILED
    except (ValueError, KeyError) as error:  # a server that answers, but not as kpd does
        print(f"kpd: unexpected answer from {url}: {error!r}", file=sys.stderr)
        return FAILED


def _produce(client: KpdClient, args: argparse.Namespace) -> int:
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


def _pop(client: KpdClient, args: argparse.Namespace) -> int:
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


def _settle(client: KpdClient, args: argparse.Namespace) -> int:
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


def _schedules(client: KpdClient, args: argparse.Namespace) -> int:
    schedule_id = args.id
    if args.action == "get":
        _emit(client.schedule(schedule_id))
    else:
        client.cancel(schedule_id)
        _emit({"id": args.id, "state": "cancelled"})
    return DONE


def _redrive(client: KpdClient, args: argparse.Namespace) -> int:
    _emit(client.redrive(args.group, args.max, args.topic))
    return DONE


def _seek(client: KpdClient, args: argparse.Namespace) -> int:
    for position in client.seek(args.group, args.topic, args.to, args.time_ms):
        _emit(position)
    return DONE


def _delete_group(client: KpdClient, args: argparse.Namespace) -> int:
    _emit({"group": args.group, "deleted_topics": client.delete_group(args.group, args.topics)})
    return DONE


def _groups(client: KpdClient, args: argparse.Namespace) -> int:
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


def _print_problem(error: KpdError) -> None:
    problem = error.problem
    print(f"kpd: {error.status} {error.code}: {problem.get('detail')}", file=sys.stderr)
    for item in problem.get("errors") or []:
        if isinstance(item, dict):
            bounds = f" {item['bounds']}" if item.get("bounds") else ""
            print(f"  {item.get('field')}: {item.get('message')}{bounds}", file=sys.stderr)


def _checked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as error:
        raise UsageError(f"URL {url!r}: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(f"URL {url!r}: expected http(s)://host[:port][/path]")
    return url.rstrip("/")


def _text(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def _count(value: str) -> int:
    if not (value.isascii() and value.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value!r}")
    return int(value)
