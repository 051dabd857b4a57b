"""Shared fixtures: one real Kafka broker per test session, unique topics, sidecar processes.

Every topic a test makes is deleted when the test ends (its `new_topic` topics and all topics of
its sidecars' namespace), and the session checks at its end that no topic with its tag is left,
so `KPD_BOOTSTRAP=<cluster> make test` leaves a shared cluster as it found it. Test topics use
the broker's default replication factor (-1), or `KPD_TEST_TOPIC_REPLICATION` when set.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import settings
from kafka_helpers import SESSION_TAG, TopicCleanup, topic_ready, unique, wait_for

from devtools.broker_for_tests import broker_for_tests, topic_replication_from_env
from devtools.local_sidecar import SidecarProcess, isolated_env, plain_http

ROOT = Path(__file__).resolve().parent.parent
# Two cores shared with a broker, sidecars and Spark: per-example time limits would only measure
# the machine's load, so property tests have none.
settings.register_profile("kpd", deadline=None)
settings.load_profile("kpd")
COMPAT_CHECKS = ROOT / "tests" / "compat"
BROKER_HOME = ROOT / ".kpd" / "test-kafka"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The client checks (tests/compat: Java, node, kcat) belong to `make compat`: collected
    only when named on the command line, never by a bare `pytest` (`make test`)."""
    if collection_path != COMPAT_CHECKS:
        return None
    start = config.invocation_params.dir
    named = [(start / arg.split("::")[0]).resolve() for arg in config.args]
    return not any(path.is_relative_to(COMPAT_CHECKS) for path in named)


def session_topics(admin: AdminClient) -> set[str]:
    return {t for t in admin.list_topics(timeout=30).topics if SESSION_TAG in t}


# Under pytest-xdist (`make test` runs several workers) the controller starts one broker and
# every worker uses it: topics are unique per test and each worker checks its own tag at its end.
SHARED_BROKER = pytest.StashKey[tuple[ExitStack, str]]()
# Tests kept on one worker: those sharing a module-scoped sidecar, and Spark's (one JVM).
SPARK_TESTS = ROOT / "tests" / "spark"
ONE_WORKER_MODULES = (
    "test_hostile_input.py",
    "test_compose.py",
    "test_delay_http.py",
    "test_http_guards.py",
    "test_cli.py",
)


def _distributing(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("dsession")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _distributing(session.config):
        stack = ExitStack()
        bootstrap = stack.enter_context(broker_for_tests(os.environ, BROKER_HOME))
        session.config.stash[SHARED_BROKER] = (stack, bootstrap)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["kpd_bootstrap"] = node.config.stash[SHARED_BROKER][1]


def pytest_sessionfinish(session: pytest.Session) -> None:
    shared = session.config.stash.get(SHARED_BROKER, None)
    if shared is not None:
        shared[0].close()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's own marker, named here too so a run without xdist still knows it.
    config.addinivalue_line("markers", "xdist_group(name): run on the worker of this group")


def group_of(path: Path) -> str | None:
    """The xdist group of a test file's tests, if they must share a worker."""
    if path.is_relative_to(SPARK_TESTS):
        return "spark"
    return path.stem if path.name in ONE_WORKER_MODULES else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests that must share a worker (`--dist loadgroup`)."""
    for item in items:
        group = group_of(Path(item.path))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Stop at once if xdist dropped the groups from the test ids, as pytest-xdist 3.8 does
    silently under pytest 9.2 (pytest-xdist#1386): grouped tests would run on every worker."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [i for i in ids if "@" not in i and group_of(ROOT / i.split("::")[0]) is not None]
    if lost:
        pytest.exit(f"pytest-xdist ignored the groups of {len(lost)} tests: {lost[:3]}", 3)


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    shared = getattr(request.config, "workerinput", {}).get("kpd_bootstrap")
    source = nullcontext(shared) if shared else broker_for_tests(os.environ, BROKER_HOME)
    with source as bootstrap:
        yield bootstrap
        # Session end: whatever a test made and did not delete shows up here as an error.
        left = session_topics(AdminClient({"bootstrap.servers": bootstrap}))
        assert not left, f"the tests left {len(left)} topics behind: {sorted(left)[:20]}"


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic_cleanup(admin: AdminClient) -> Iterator[TopicCleanup]:
    """Set up before `new_topic` and `sidecar_factory`, so it runs after both tear down (the
    sidecars are stopped first: a running one could still write to a topic being deleted)."""
    cleanup = TopicCleanup(admin)
    yield cleanup
    cleanup.delete_all()


@pytest.fixture
def new_topic(admin: AdminClient, topic_cleanup: TopicCleanup) -> Callable[..., str]:
    """`new_topic()` creates a topic with a unique name, visible to clients, and returns it."""
    replication = topic_replication_from_env(os.environ)

    def create(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique(prefix)
        topic_cleanup.names.add(name)
        spec = NewTopic(name, partitions, replication_factor=replication, config=config or {})
        admin.create_topics([spec])[name].result(timeout=30)
        wait_for(lambda: topic_ready(admin, name, partitions), 30, f"topic {name} in metadata")
        return name

    return create


class SidecarUnderTest(SidecarProcess):
    """A real `kpd run` child process; failures to start fail the test."""

    def start(self, ready: bool = True) -> SidecarUnderTest:
        self.spawn()
        if ready:
            wait_for(self.is_ready, 60, f"sidecar {self.env['KPD_NODE_ID']} ready")
        return self

    def is_ready(self) -> bool:
        try:
            return super().is_ready()
        except RuntimeError as error:
            pytest.fail(str(error))

    def client(self) -> httpx.Client:
        return plain_http(self.url)

    def retry_topic(self, group: str) -> str:
        """The pop group's default retry topic: under this sidecar's namespace."""
        return f"{self.env['KPD_STATE_TOPIC_PREFIX']}retry.{group}"

    def dlq_topic(self, group: str) -> str:
        return f"{self.env['KPD_STATE_TOPIC_PREFIX']}dlq.{group}"


def _sidecars(
    bootstrap_default: str, base: Path, cleanup: TopicCleanup
) -> Iterator[Callable[..., SidecarUnderTest]]:
    """Make sidecars with their own topics (one namespace per fixture) and data dirs under
    `base`; kill them when done and fail on a native crash in their logs."""
    namespace = unique("kpdtest")
    cleanup.prefixes.add(f"{namespace}.")
    started: list[SidecarUnderTest] = []
    replication = topic_replication_from_env(os.environ)

    def make(node_id: str = "a", **settings: str) -> SidecarUnderTest:
        bootstrap = settings.pop("bootstrap", bootstrap_default)
        if bootstrap == bootstrap_default and replication != -1:
            settings.setdefault("topic_replication", str(replication))
        env = isolated_env(bootstrap, node_id, base / node_id, namespace, **settings)
        sidecar = SidecarUnderTest(env, base / f"{node_id}.log")
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        if sidecar.running():
            sidecar.terminate(signal.SIGKILL)
    crashed = {s.env["KPD_NODE_ID"]: native_crashes(s.log_path) for s in started}
    crashed = {node: lines for node, lines in crashed.items() if lines}
    if crashed:  # `kpd run` restarts a crashed worker: only its log tells
        pytest.fail(f"a sidecar worker crashed in native code: {crashed}")


@pytest.fixture
def sidecar_factory(
    kafka_bootstrap: str, tmp_path: Path, topic_cleanup: TopicCleanup
) -> Iterator[Callable[..., SidecarUnderTest]]:
    """Make sidecars with their own topics (one namespace per test) and data dirs."""
    yield from _sidecars(kafka_bootstrap, tmp_path, topic_cleanup)


@pytest.fixture(scope="module")
def module_sidecar_factory(
    kafka_bootstrap: str, admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., SidecarUnderTest]]:
    """`sidecar_factory` for sidecars a module's tests share (a sidecar start costs a second of
    CPU); their topics go when the module ends. A module using it is kept on one xdist worker
    (`ONE_WORKER_MODULES`), else each worker would start its own."""
    cleanup = TopicCleanup(admin)
    yield from _sidecars(kafka_bootstrap, tmp_path_factory.mktemp("shared"), cleanup)
    cleanup.delete_all()


# What a worker's native crash leaves in its log: an assertion or fatal error of librdkafka or
# CPython, and `kpd run` reporting a worker killed by SIGABRT or SIGSEGV (tests kill with SIGKILL).
NATIVE_CRASH_MARKS = ("Assertion `", "Fatal Python error", "code=-6 ", "code=-11 ")


def native_crashes(log_path: Path) -> list[str]:
    if not log_path.exists():
        return []
    lines = log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if any(mark in line for mark in NATIVE_CRASH_MARKS)]
