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
import os
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from kpd_client import cli_verbs
from kpd_client.cli_messages import UsageError
from kpd_client.cli_verbs import FAILED, USAGE
from kpd_client.client import KpdClient
from kpd_client.retry import KpdError

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

    produce = verb("produce", cli_verbs.produce, "produce one message, or JSON lines from stdin")
    produce.add_argument("topic", type=_text)
    produce.add_argument("--value", help="the message value (text); without it, read stdin")
    produce.add_argument("--key")
    produce.add_argument("--header", action="append", default=[], metavar="NAME=VALUE")
    due = produce.add_mutually_exclusive_group()
    due.add_argument("--delay-ms", type=_count)
    due.add_argument("--deliver-at", metavar="ISO|MS", help="epoch ms or ISO-8601 with a zone")
    produce.add_argument("--id", help="schedule id (with --delay-ms or --deliver-at)")

    pop = verb("pop", cli_verbs.pop, "lease messages; one JSON line each, receipt included")
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
        settle = verb(name, cli_verbs.settle, description)
        settle.set_defaults(call=call, verb_name=name)
        settle.add_argument("group", type=_text)
        settle.add_argument("receipts", nargs="+", metavar="RECEIPT", help="or - to read stdin")
        if call == "nack":
            settle.add_argument("--delay-ms", type=_count)
        elif call == "reject":
            settle.add_argument("--reason")
        elif call == "leases":
            settle.add_argument("--invisible-ms", type=_count, required=True)

    schedules = verb("schedules", cli_verbs.schedules, "read or cancel a delayed message")
    schedules.add_argument("action", choices=["get", "cancel"])
    schedules.add_argument("id", type=_text)

    redrive = verb("redrive", cli_verbs.redrive, "send a group's dead letters back to it")
    redrive.add_argument("group", type=_text)
    redrive.add_argument("--max", type=_count, default=10_000, help="at most (1..100000)")
    redrive.add_argument("--topic", type=_text, help="only dead letters of this topic")

    seek = verb("seek", cli_verbs.seek, "move a group's position in a topic (--to latest purges)")
    seek.add_argument("group", type=_text)
    seek.add_argument("topic", type=_text)
    target = seek.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", choices=["earliest", "latest"])
    target.add_argument("--time-ms", type=_count, help="the first message at or after (epoch ms)")

    groups = verb("groups", cli_verbs.groups, "a pop group's config and live stats")
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
    parser.set_defaults(verb=cli_verbs.delete_group)
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
