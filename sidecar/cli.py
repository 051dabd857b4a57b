"""`kpd` command line: run a sidecar, manage the local Kafka, run the Spark audit."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sidecar.config import SettingsError, load_settings
from sidecar.local_kafka import DEFAULT_DIR, DEFAULT_PORT, LocalKafka, LocalKafkaError
from sidecar.maven import MavenError


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
    args = _parser().parse_args(args_list)
    try:
        if args.command == "kafka":
            return _kafka(args.action, LocalKafka(home=args.dir, port=args.port))
        if args.config:
            os.environ["KPD_CONFIG"] = args.config
        from sidecar.run import run_sidecar

        return run_sidecar(load_settings())
    except (SettingsError, LocalKafkaError, MavenError) as error:
        print(f"kpd: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
