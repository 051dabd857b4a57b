"""What differs between Apache Kafka releases when we assemble and run one from Maven Central.

3.x and 4.x brokers differ in three places that matter here: the KRaft quorum keys (dynamic
quorum with `--standalone` from 4.x; a static `controller.quorum.voters` list in 3.x), logging
(log4j2 in 4.x, log4j 1 through reload4j in 3.x, neither binding in the POM), and where
`ConsumerGroupCommand` lives (the broker jar up to 3.7, the `kafka-tools` artifact after).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from foundation.maven import Artifact, fetch_jars

DEFAULT_VERSION = "4.2.1"
OLDEST_SUPPORTED = (3, 6)  # KRaft combined mode with transactions; older releases are untested
VERSION_PATTERN = re.compile(r"^([0-9]{1,2})\.([0-9]{1,3})\.([0-9]{1,3})$")  # ASCII only
# 3.x releases ship these two in their distribution's libs/ but not in the kafka_2.13 POM.
RELOAD4J = (Artifact("ch.qos.reload4j", "reload4j", "1.2.25"),)
SLF4J_RELOAD4J = (Artifact("org.slf4j", "slf4j-reload4j", "1.7.36"),)
OLD_GROUP_COMMAND = "kafka.admin.ConsumerGroupCommand"
NEW_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# `kafka-configs` (client quotas): in the core jar of every supported release, 3.6 to 4.2.
CONFIG_COMMAND = "kafka.admin.ConfigCommand"

# Tuned for fast tests on two cores: single-partition internal topics, no initial rebalance
# delay, few threads, a small cleaner buffer (the 128 MiB default can exhaust a small heap), and
# a low minimum session timeout so failover tests need not wait 6 s per member.
COMMON_PROPERTIES = """\
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data_dir}
num.partitions={partitions}
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.dedupe.buffer.size=2097152
auto.create.topics.enable=false
"""
DYNAMIC_QUORUM_PROPERTIES = """\
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.share.enable=true
"""
STATIC_QUORUM_PROPERTIES = "controller.quorum.voters=1@127.0.0.1:{controller_port}\n"

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
LOG4J1_PROPERTIES = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log_file}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=WARN
log4j.logger.org.apache.kafka=WARN
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""


class UnsupportedKafkaVersion(ValueError):
    """The version string is malformed or names a release kpd does not assemble."""


@dataclass(frozen=True)
class LoggingSetup:
    file_name: str  # written into the broker folder
    content: str
    jvm_flag: str  # `{path}` is replaced by the file's absolute path


@dataclass(frozen=True)
class KafkaRelease:
    version: str = DEFAULT_VERSION

    def __post_init__(self) -> None:
        match = VERSION_PATTERN.match(self.version)
        if match is None:
            raise UnsupportedKafkaVersion(
                f"Kafka version must look like 4.2.1, got {self.version[:40]!r}"
            )
        if (int(match.group(1)), int(match.group(2))) < OLDEST_SUPPORTED:
            oldest = ".".join(map(str, OLDEST_SUPPORTED))
            raise UnsupportedKafkaVersion(f"Kafka {self.version} is older than {oldest}")

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def dynamic_quorum(self) -> bool:
        return self.major >= 4

    def broker_libs(self) -> Path:
        """The broker's runtime jars, fetched once (3.x with its log4j 1 backend)."""
        extra = () if self.major >= 4 else RELOAD4J + SLF4J_RELOAD4J
        kafka = Artifact("org.apache.kafka", "kafka_2.13", self.version)
        return fetch_jars(f"kafka-{self.version}", [kafka, *extra])

    def classpath(self) -> str:
        """`java -cp` value for the broker and StorageTool."""
        libs = self.broker_libs()
        folders = [libs]
        if self.major >= 4:
            # The SLF4J 1.7 binding at the log4j2 version this release resolved (not in its POM).
            log4j = _jar_version(libs, "log4j-core")
            binding = Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", log4j)
            folders.append(fetch_jars(f"log4j-slf4j-impl-{log4j}", [binding]))
        return ":".join(f"{folder}/*" for folder in folders)

    def consumer_group_command(self) -> tuple[str, str]:
        """(classpath, main class) of `kafka-consumer-groups` for this release."""
        libs = self.broker_libs()
        with zipfile.ZipFile(libs / f"kafka_2.13-{self.version}.jar") as core:
            if "kafka/admin/ConsumerGroupCommand.class" in core.namelist():
                return self.classpath(), OLD_GROUP_COMMAND
        tools = fetch_jars(
            f"kafka-tools-{self.version}",
            [Artifact("org.apache.kafka", "kafka-tools", self.version)],
        )
        return f"{tools}/*", NEW_GROUP_COMMAND

    def server_properties(
        self, *, port: int, controller_port: int, data_dir: Path, partitions: int
    ) -> str:
        quorum = DYNAMIC_QUORUM_PROPERTIES if self.dynamic_quorum else STATIC_QUORUM_PROPERTIES
        return (COMMON_PROPERTIES + quorum).format(
            port=port, controller_port=controller_port, data_dir=data_dir, partitions=partitions
        )

    def format_args(self, cluster_id: str, config: Path) -> list[str]:
        """StorageTool arguments; a static voters list refuses `--standalone`."""
        standalone = ["--standalone"] if self.dynamic_quorum else []
        return ["format", *standalone, "-t", cluster_id, "-c", str(config), "--ignore-formatted"]

    def logging(self, log_file: Path) -> LoggingSetup:
        if self.major >= 4:
            return LoggingSetup(
                "log4j2.yaml",
                LOG4J2_YAML.format(log_file=log_file),
                "-Dlog4j2.configurationFile={path}",
            )
        return LoggingSetup(
            "log4j.properties",
            LOG4J1_PROPERTIES.format(log_file=log_file),
            "-Dlog4j.configuration=file:{path}",
        )


DEFAULT_RELEASE = KafkaRelease()


def _jar_version(folder: Path, artifact: str) -> str:
    pattern = re.compile(rf"^{re.escape(artifact)}-([0-9][A-Za-z0-9.-]*)\.jar$")
    for jar in sorted(folder.glob(f"{artifact}-*.jar")):
        match = pattern.match(jar.name)
        if match:
            return match.group(1)
    raise FileNotFoundError(f"no {artifact} jar in {folder}")
