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

from devtools.kafka_release import DEFAULT_RELEASE, KafkaRelease
from foundation.processes import alive

MIN_JAVA = 17
DEFAULT_DIR = Path(".kpd/kafka")
DEFAULT_PORT = 9092
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


class LocalKafkaError(RuntimeError):
    """A problem the user can act on (message says what to do)."""


@dataclass(frozen=True)
class LocalKafka:
    """One broker folder: `.kpd/kafka` by default, with `data/`, `logs/` and `state.json`."""

    home: Path = DEFAULT_DIR
    port: int = DEFAULT_PORT
    release: KafkaRelease = DEFAULT_RELEASE
    partitions: int = 1  # the broker's `num.partitions` (topics created with the default)

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
        if alive(pid) and "kafka.Kafka" in _cmdline(pid):
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
        classpath = self.release.classpath()
        config = self._write_config(controller_port)
        if not (self.home / "data" / "meta.properties").exists():
            cluster_id = _run_java(java, classpath, "kafka.tools.StorageTool", "random-uuid")
            format_args = self.release.format_args(cluster_id.strip(), config)
            _run_java(java, classpath, "kafka.tools.StorageTool", *format_args)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.home / "logs" / "stdout.log", "ab") as out:
            logging = self.release.logging(self.log_file.resolve())
            log_config = logging.jvm_flag.format(path=(self.home / logging.file_name).resolve())
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
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        self._state_file.unlink(missing_ok=True)
        return True

    def wipe(self) -> None:
        """Delete data and logs (the broker must be stopped)."""
        shutil.rmtree(self.home, ignore_errors=True)

    def _write_config(self, controller_port: int) -> Path:
        data_dir = (self.home / "data").resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        # A formatted KRaft folder remembers its controller listener and the release that
        # formatted it; keep the first port chosen, and refuse another release's folder.
        previous = self.home / "controller.port"
        if previous.exists():
            controller_port = int(previous.read_text())
        previous.write_text(str(controller_port))
        formatted_by = self.home / "kafka.version"
        if formatted_by.exists() and formatted_by.read_text() != self.release.version:
            raise LocalKafkaError(
                f"{self.home} holds a Kafka {formatted_by.read_text()} broker, not "
                f"{self.release.version}; stop it and delete the folder, or use another --dir"
            )
        formatted_by.write_text(self.release.version)
        config = self.home / "server.properties"
        config.write_text(
            self.release.server_properties(
                port=self.port,
                controller_port=controller_port,
                data_dir=data_dir,
                partitions=self.partitions,
            )
        )
        logging = self.release.logging(self.log_file.resolve())
        (self.home / logging.file_name).write_text(logging.content)
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
        raise LocalKafkaError(f"Kafka needs Java {MIN_JAVA}+; found: {java}")
    return java


def _run_java(java: str, classpath: str, main: str, *args: str) -> str:
    result = subprocess.run(
        [java, "-cp", classpath, main, *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LocalKafkaError(f"{main} failed: {(result.stdout + result.stderr)[-1500:]}")
    return result.stdout


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
