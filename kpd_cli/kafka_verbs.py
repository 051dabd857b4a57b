"""`kpd` verbs that talk to Kafka itself, through the configured bootstrap (not to a sidecar):

    kpd topics create NAME [--partitions N] [--replication R] [--config NAME=VALUE]...
    kpd topics list [--json]                  kpd topics describe NAME [--json]
    kpd groups list [--json]

Settings as `kpd run` reads them (kpd.toml, KPD_*); `--bootstrap` overrides KPD_BOOTSTRAP. Exit
codes as the client verbs': 0 done, 1 Kafka refused or could not be reached, 2 bad usage (nothing
sent).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from foundation.config import Settings, SettingsError, load_settings
from foundation.kafka_clients import base_config
from kpd_cli import pop_groups, topic_verbs
from kpd_cli.printing import FAILED, USAGE
from kpd_client.cli_messages import UsageError

KafkaVerb = Callable[[AdminClient, Settings, argparse.Namespace], int]


def _common_flags() -> argparse.ArgumentParser:
    """The flags every Kafka verb takes."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--bootstrap", help="Kafka bootstrap list (default: KPD_BOOTSTRAP)")
    flags.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    return flags


def add_kafka_verbs(commands: Any) -> None:
    """`topics` with its three verbs, to `kpd`'s sub-command parsers."""
    bootstrap = _common_flags()
    topics = commands.add_parser("topics", help="create, list and describe Kafka topics")
    verbs = topics.add_subparsers(dest="topics_verb", required=True)

    def verb(name: str, function: KafkaVerb, description: str) -> argparse.ArgumentParser:
        parser = verbs.add_parser(name, parents=[bootstrap], help=description)
        parser.set_defaults(kafka_verb=function)
        return parser

    create = verb("create", topic_verbs.create, "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=_bounded(1, 10_000), help="default: the broker's")
    create.add_argument("--replication", type=_bounded(1, 32), help="default: the broker's")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    verb("list", topic_verbs.listing, "topics and their partition counts")
    describe = verb("describe", topic_verbs.describe, "a topic's partitions and offsets")
    describe.add_argument("name")


def groups_list_parser() -> argparse.ArgumentParser:
    """`kpd groups list`: read apart from `kpd groups GROUP` (a sidecar's answer for one group)."""
    parser = argparse.ArgumentParser(
        prog="kpd groups list",
        description="pop groups with their backlog, from Kafka",
        parents=[_common_flags()],
    )
    parser.set_defaults(kafka_verb=pop_groups.listing)
    return parser


def run_kafka_verb(args: argparse.Namespace) -> int:
    try:
        overrides = {"bootstrap": args.bootstrap} if args.bootstrap else {}
        settings = load_settings(**overrides)
    except SettingsError as error:
        print(f"kpd: {error}", file=sys.stderr)
        return USAGE
    verb: KafkaVerb = args.kafka_verb
    try:
        # librdkafka's own log lines would repeat each failed connect: the error is reported once.
        admin = AdminClient({**base_config(settings), "log_level": 0})
        return verb(admin, settings, args)
    except UsageError as error:
        print(f"kpd: {error}", file=sys.stderr)
        return USAGE
    except KafkaException as error:
        kafka_error = error.args[0] if error.args else error
        name = kafka_error.name() if hasattr(kafka_error, "name") else type(error).__name__
        detail = kafka_error.str() if hasattr(kafka_error, "str") else str(error)
        print(f"kpd: Kafka at {settings.bootstrap}: {name}: {detail}", file=sys.stderr)
        return FAILED


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
            raise argparse.ArgumentTypeError(f"expected a number {low}..{high}, got {value!r}")
        return int(value)

    return parse
