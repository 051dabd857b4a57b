"""`kpd` command line: run a sidecar, manage the local Kafka, run the Spark audit, and the client
verbs (produce, pop, ack, ...: `kpd_client.cli`) that talk to a running sidecar."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from devtools.local_kafka import DEFAULT_DIR, DEFAULT_PORT, LocalKafka, LocalKafkaError
from foundation.config import Settings, SettingsError, load_settings
from foundation.maven import MavenError
from kpd_cli.kafka_verbs import add_kafka_verbs, groups_list_parser, run_kafka_verb
from kpd_client.cli import UsageError, add_verbs, groups_delete_parser, run_verb


class _HttpAddress(BaseSettings):
    """Only the HTTP address of `Settings` (same sources): a client verb must not fail on an
    unrelated setting, or on KPD_* variables that `kpd run` would refuse."""

    model_config = SettingsConfigDict(env_prefix="KPD_", extra="ignore")
    http_host: str = Settings.model_fields["http_host"]
    http_port: int = Settings.model_fields["http_port"]

    # The same sources as Settings: environment, then kpd.toml (or KPD_CONFIG).
    settings_customise_sources = classmethod(Settings.settings_customise_sources.__func__)


def configured_url() -> str:
    """The local sidecar's URL from kpd.toml / KPD_HTTP_HOST / KPD_HTTP_PORT (a wildcard listen
    address is reached on loopback)."""
    try:
        address = _HttpAddress()
    except ValidationError as error:
        problems = "; ".join(
            f"KPD_{str(e['loc'][0]).upper()} {e['input']!r}: {e['msg']}" for e in error.errors()
        )
        raise UsageError(f"{problems}; give --url or KPD_URL") from None
    except ValueError as error:  # a TOML syntax error
        raise UsageError(f"cannot read settings: {error}; give --url or KPD_URL") from None
    host = address.http_host
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return (
        f"http://[{host}]:{address.http_port}"
        if ":" in host
        else f"http://{host}:{address.http_port}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kpd", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a sidecar (settings: kpd.toml and KPD_* env)")
    run.add_argument("--config", help="settings file (default: kpd.toml, or KPD_CONFIG)")

    kafka = commands.add_parser("kafka", help="a local single-node Apache Kafka for development")
    kafka.add_argument("action", choices=["start", "stop", "status"])
    kafka.add_argument(
        "--port", type=int, default=int(os.environ.get("KPD_KAFKA_PORT", DEFAULT_PORT))
    )
    kafka.add_argument(
        "--dir", type=Path, default=Path(os.environ.get("KPD_KAFKA_DIR", DEFAULT_DIR))
    )

    commands.add_parser(
        "audit", help="Spark delivery audit (see `kpd audit --help`)", add_help=False
    )
    add_kafka_verbs(commands)
    add_verbs(commands)
    return parser


def _kafka(action: str, broker: LocalKafka) -> int:
    if action == "start":
        already = broker.running_pid() is not None
        bootstrap = broker.start()
        print(f"kafka {'already running' if already else 'started'} at {bootstrap}")
        return 0
    if action == "stop":
        print("kafka stopped" if broker.stop() else "kafka is not running")
        return 0
    pid = broker.running_pid()
    if pid is None:
        print("kafka is not running")
        return 3  # the LSB status code for "not running"
    print(f"kafka running at {broker.recorded_bootstrap()} (pid {pid})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["audit"]:
        from spark.audit import main as audit_main  # pyspark is heavy: import only when asked

        return audit_main(args_list[1:])
    if args_list[:2] == ["groups", "list"]:  # a group named "list": `kpd groups --json list`
        return run_kafka_verb(groups_list_parser().parse_args(args_list[2:]))
    if args_list[:2] == ["groups", "delete"]:  # likewise `kpd groups --json delete`
        return run_verb(groups_delete_parser().parse_args(args_list[2:]), configured_url)
    args = _parser().parse_args(args_list)
    if "kafka_verb" in args:
        return run_kafka_verb(args)
    if "verb" in args:
        return run_verb(args, configured_url)
    try:
        if args.command == "kafka":
            return _kafka(args.action, LocalKafka(home=args.dir, port=args.port))
        if args.config:
            os.environ["KPD_CONFIG"] = args.config
        from sidecar.workers import run_sidecar  # not the worker's web stack

        return run_sidecar(load_settings())
    except (SettingsError, LocalKafkaError, MavenError) as error:
        print(f"kpd: {error}", file=sys.stderr)
        return 2
