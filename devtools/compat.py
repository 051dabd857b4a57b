"""`make compat`: the integration suite and the client checks against several Kafka releases.

Each release is assembled from Maven Central and started alone on a free port with
`num.partitions=3` (real clusters are not single-partition brokers), then tested through
`KPD_BOOTSTRAP`, as an existing cluster is. Afterwards the broker must hold no topic but its own
internal ones (the tests leave nothing behind). Prints a matrix; exits 1 unless all is green.

    python -m devtools.compat [--versions 3.6.2 3.9.1 4.2.1] [--partitions 3] [-- pytest args]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from devtools.broker_for_tests import free_port
from devtools.kafka_release import KafkaRelease
from devtools.local_kafka import LocalKafka

DEFAULT_VERSIONS = ("3.6.2", "3.9.1", "4.2.1")
DEFAULT_PARTITIONS = 3
TEST_PATHS = ("tests/integration", "tests/compat")
# The client checks run these; without them a run of minutes would end in their failures.
CLIENT_TOOLS = {"kcat": "apt-get install kcat", "node": "apt-get install nodejs"}
ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = ROOT / ".kpd" / "compat"


@dataclass
class Outcome:
    version: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    leftover_topics: list[str] = field(default_factory=list)
    minutes: float = 0.0

    @property
    def green(self) -> bool:
        return bool(self.passed) and not self.failed and not self.leftover_topics


def read_junit(report: Path) -> tuple[list[str], list[str]]:
    """(passed, failed) test ids; a test with a failure or an error (also at teardown) failed."""
    passed, failed = [], []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is None:
            passed.append(name)
    return passed, failed


def run_release(version: str, partitions: int, pytest_args: Sequence[str]) -> Outcome:
    outcome = Outcome(version)
    started = time.monotonic()
    broker = LocalKafka(
        home=WORK_DIR / f"kafka-{version}",
        port=free_port(),
        release=KafkaRelease(version),
        partitions=partitions,
    )
    broker.stop()
    broker.wipe()  # a fresh broker per run
    bootstrap = broker.start()
    report = WORK_DIR / f"junit-{version}.xml"
    try:
        env = {
            **os.environ,
            "KPD_BOOTSTRAP": bootstrap,
            "KPD_TEST_KAFKA_VERSION": version,
            "KPD_TEST_KAFKA_PARTITIONS": str(partitions),
        }
        command = [sys.executable, "-m", "pytest", *TEST_PATHS, f"--junitxml={report}", "-q"]
        print(f"\n=== Kafka {version} at {bootstrap}: {' '.join(command[2:])}", flush=True)
        subprocess.run([*command, *pytest_args], cwd=ROOT, env=env, check=False)
        outcome.passed, outcome.failed = read_junit(report)
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
        outcome.leftover_topics = sorted(t for t in topics if not t.startswith("__"))
    finally:
        broker.stop()
        broker.wipe()
    outcome.minutes = (time.monotonic() - started) / 60
    return outcome


def matrix(outcomes: Sequence[Outcome], partitions: int) -> str:
    lines = [
        "| Kafka | num.partitions | passed | failed | topics left | minutes | failed tests |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        failed = "<br>".join(o.failed) or "-"
        lines.append(
            f"| {o.version} | {partitions} | {len(o.passed)} | {len(o.failed)} | "
            f"{len(o.leftover_topics)} | {o.minutes:.1f} | {failed} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.compat", description=__doc__)
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    releases = [KafkaRelease(v) for v in args.versions]  # refuse a bad version before any run
    missing = [f"{tool} ({how})" for tool, how in CLIENT_TOOLS.items() if not shutil.which(tool)]
    if missing:
        print(f"make compat needs {', '.join(missing)}", file=sys.stderr)
        return 2
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    outcomes = [run_release(r.version, args.partitions, args.pytest_args) for r in releases]
    table = matrix(outcomes, args.partitions)
    (WORK_DIR / "matrix.md").write_text(table + "\n")
    print(f"\n{table}\n(also in {WORK_DIR / 'matrix.md'})")
    for o in outcomes:
        if o.leftover_topics:
            print(f"Kafka {o.version}: topics left behind: {o.leftover_topics[:20]}")
    return 0 if all(o.green for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
