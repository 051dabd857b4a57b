"""`kpd kafka start|stop|status`: a real single-node Apache Kafka (KRaft) for development and tests.

The broker is assembled from Maven Central jars (no Docker, no Apache mirrors) into a shared cache,
and runs from a project-local folder holding its config, data, log and pid file. Start and stop
are idempotent so scripts and test fixtures can call them blindly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sidecar.maven import Artifact, fetch_jars

KAFKA_VERSION = "4.2.1"
LOG4J_VERSION = "2.25.3"  # the log4j2 release Kafka 4.2.1 is built against
MIN_JAVA = 17
DEFAULT_DIR = Path(".kpd/kafka")
DEFAULT_PORT = 9092
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

# Tuned for fast tests on two cores: single-partition internal topics, no initial rebalance
# delay, few threads, a small cleaner buffer (the 128 MiB default can exhaust a small heap), and
# a low minimum session timeout so failover tests need not wait 6 s per member.
SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data_dir}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.share.enable=true
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.dedupe.buffer.size=2097152
auto.create.topics.enable=false
"""

LOG4J2_YAML = """\
Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log_file}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka
        level: WARN
      - name: org.apache.kafka
        level: WARN
      - name: kafka.server.KafkaRaftServer
        level: INFO
"""


class LocalKafkaError(RuntimeError):
    """A problem the user can act on (message says what to do)."""


@dataclass(frozen=True)
class LocalKafka:
    """One broker folder: `.kpd/kafka` by default, with `data/`, `logs/` and `state.json`."""

    home: Path = DEFAULT_DIR
    port: int = DEFAULT_PORT

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def _state_file(self) -> Path:
        return self.home / "state.json"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "server.log"

    def running_pid(self) -> int | None:
        """The broker's pid if the recorded process is alive, else None (clearing stale state)."""
        try:
            state = json.loads(self._state_file.read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if _alive(pid) and "kafka.Kafka" in _cmdline(pid):
            return pid
        self._state_file.unlink(missing_ok=True)
        return None

    def recorded_bootstrap(self) -> str | None:
        try:
            return str(json.loads(self._state_file.read_text())["bootstrap"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def start(self) -> str:
        """Start the broker unless it already runs; return its bootstrap address once it answers."""
        if self.running_pid() is not None:
            bootstrap = self.recorded_bootstrap() or self.bootstrap
            wait_until_ready(bootstrap, READY_TIMEOUT_S)
            return bootstrap
        java = _check_java()
        controller_port = _free_port()
        if not _port_free(self.port):
            raise LocalKafkaError(
                f"port {self.port} on 127.0.0.1 is taken by another process; stop it or choose "
                "another port with `kpd kafka start --port N` (or KPD_KAFKA_PORT)"
            )
        libs = fetch_jars(
            f"kafka-{KAFKA_VERSION}",
            [
                Artifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
                Artifact("org.apache.logging.log4j", "log4j-slf4j-impl"),
            ],
            boms=[Artifact("org.apache.logging.log4j", "log4j-bom", LOG4J_VERSION, "pom")],
        )
        config = self._write_config(controller_port)
        classpath = f"{libs}/*"
        if not (self.home / "data" / "meta.properties").exists():
            _run_java(
                java,
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                "-t",
                _cluster_id(java, classpath),
                "-c",
                str(config),
                "--ignore-formatted",
            )
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.home / "logs" / "stdout.log", "ab") as out:
            log_config = f"-Dlog4j2.configurationFile={self.home / 'log4j2.yaml'}"
            process = subprocess.Popen(
                [
                    java,
                    "-Xms256m",
                    "-Xmx1g",
                    log_config,
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # survives the CLI, ends with `kpd kafka stop`
            )
        self._state_file.write_text(json.dumps({"pid": process.pid, "bootstrap": self.bootstrap}))
        try:
            wait_until_ready(self.bootstrap, READY_TIMEOUT_S, process)
        except LocalKafkaError:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> bool:
        """SIGTERM the broker and wait for it to exit; False when it was not running."""
        pid = self.running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self._state_file.unlink(missing_ok=True)
        return True

    def wipe(self) -> None:
        """Delete data and logs (the broker must be stopped)."""
        shutil.rmtree(self.home, ignore_errors=True)

    def _write_config(self, controller_port: int) -> Path:
        data_dir = (self.home / "data").resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        # A formatted KRaft folder remembers its controller listener; keep the first port chosen.
        previous = self.home / "controller.port"
        if previous.exists():
            controller_port = int(previous.read_text())
        previous.write_text(str(controller_port))
        config = self.home / "server.properties"
        config.write_text(
            SERVER_PROPERTIES.format(
                port=self.port, controller_port=controller_port, data_dir=data_dir
            )
        )
        (self.home / "log4j2.yaml").write_text(LOG4J2_YAML.format(log_file=self.log_file.resolve()))
        return config


def wait_until_ready(
    bootstrap: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until the broker answers a metadata request (the port alone is not enough)."""
    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise LocalKafkaError(
                f"the Kafka broker exited with status {process.returncode}; see .kpd logs"
            )
        try:
            metadata = admin.list_topics(timeout=2)
            if metadata.brokers:
                return
        except Exception:  # KafkaException while the broker is still starting
            time.sleep(0.2)
    raise LocalKafkaError(f"Kafka at {bootstrap} did not answer within {timeout_s:.0f} s")


def _check_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise LocalKafkaError(
            f"Java is not on PATH; install a JDK {MIN_JAVA}+ (e.g. `apt-get install "
            "openjdk-17-jre-headless`) to run the local Kafka broker"
        )
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)', version.stderr + version.stdout)
    if match is None or int(match.group(1)) < MIN_JAVA:
        raise LocalKafkaError(f"Kafka {KAFKA_VERSION} needs Java {MIN_JAVA}+; found: {java}")
    return java


def _run_java(java: str, classpath: str, main: str, *args: str) -> str:
    result = subprocess.run(
        [java, "-cp", classpath, main, *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LocalKafkaError(f"{main} failed: {(result.stdout + result.stderr)[-1500:]}")
    return result.stdout


def _cluster_id(java: str, classpath: str) -> str:
    return _run_java(java, classpath, "kafka.tools.StorageTool", "random-uuid").strip()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
