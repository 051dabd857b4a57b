"""A `kpd run` child process with its own port, data dir and topic namespace.

Tests and benchmarks run real sidecars side by side on one broker; a namespace gives each group
of them its own buffer, log and state topics, so nothing leaks between runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devtools.broker_for_tests import free_port

TREE = Path(__file__).resolve().parents[1]  # the source tree these tools belong to


def isolated_env(
    bootstrap: str, node_id: str, data_dir: Path, namespace: str, **settings: str
) -> dict[str, str]:
    """The environment of a sidecar in `namespace`: no KPD_* of ours leaks in."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("KPD_")},
        "KPD_BOOTSTRAP": bootstrap,
        "KPD_NODE_ID": node_id,
        "KPD_HTTP_PORT": str(free_port()),
        "KPD_DATA_DIR": str(data_dir),
        "KPD_STATE_TOPIC_PREFIX": f"{namespace}.",
        "KPD_BUFFER_TOPIC": f"{namespace}.delay",
        "KPD_INVALID_TOPIC": f"{namespace}.invalid",
        "KPD_DELIVERY_LOG_TOPIC": f"{namespace}.delivery-log",
        # Two shards: every test crosses shards (re-keyed schedules, lanes on both), cheaply;
        # one worker, as the tests name nodes (several workers are tested on purpose).
        "KPD_SHARDS": "2",
        "KPD_WORKERS": "1",
        **{f"KPD_{name.upper()}": value for name, value in settings.items()},
    }


def spawn_env(env: dict[str, str]) -> dict[str, str]:
    """`env`, with this source tree first on the child's PYTHONPATH: the child runs the code of the
    tree that started it. An editable install maps kpd's packages to the folder it was made from,
    so a sidecar started from another checkout (a git worktree sharing that venv) ran the code of
    the installed one."""
    paths = [str(TREE), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def plain_http(base_url: str = "", timeout_s: float = 30) -> httpx.Client:
    """A client for local sidecars, which speak plain HTTP: it builds no TLS context, which httpx
    otherwise loads for every client (some 25 ms of CPU: most of what a test polling a sidecar
    for readiness spent)."""
    return httpx.Client(base_url=base_url, timeout=timeout_s, verify=False)


class SidecarProcess:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.port = int(env["KPD_HTTP_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = Path(env["KPD_DATA_DIR"])
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._probe: httpx.Client | None = None  # kept: a readiness poll reuses its connection

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kpd_cli", "run"],
                env=spawn_env(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log_path.parent,  # no kpd.toml there: settings come from env only
                # Its own process group: a signal reaches the supervisor and its workers alike,
                # so SIGSTOP pauses the whole sidecar (a zombie) and SIGKILL crashes all of it.
                start_new_session=True,
            )

    def is_ready(self) -> bool:
        """True once /readyz answers 200; RuntimeError if the process has exited."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"sidecar exited with {self.process.returncode}:\n{self.log()}")
        if self._probe is None:
            self._probe = plain_http(self.url, 1)
        with contextlib.suppress(httpx.HTTPError):
            return self._probe.get("/readyz").status_code == 200
        return False

    def wait_ready(self, timeout_s: float) -> float:
        """Block until ready; the seconds it took."""
        started = time.monotonic()
        while not self.is_ready():
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"sidecar not ready after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)
        return time.monotonic() - started

    def launch(self, timeout_s: float) -> float:
        """Spawn and wait until ready; the seconds it took."""
        self.spawn()
        return self.wait_ready(timeout_s)

    def stop(self) -> None:
        """SIGTERM if still running, and wait for the exit."""
        if self.running():
            self.terminate(signal.SIGTERM, 60)

    def terminate(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60) -> int:
        assert self.process is not None
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self.process.poll() is None:
            self.signal(sig)
        return self.process.wait(timeout=timeout_s)

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the supervisor and its workers (SIGTERM: the supervisor stops them)."""
        assert self.process is not None
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.process.send_signal(sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [int(child) for child in children]

    def metrics(self) -> dict[str, float]:
        """Samples by name summed over their labels (per-shard gauges); no histogram buckets."""
        with plain_http(self.url, 10) as http:
            text = http.get("/metrics").text
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if "le" not in sample.labels:
                    values[sample.name] = values.get(sample.name, 0.0) + sample.value
        return values

    def cpu_s(self) -> float:
        """User + system CPU seconds so far of the supervisor and its workers together."""
        assert self.process is not None
        return sum(process_cpu_s(pid) for pid in [self.process.pid, *self.worker_pids()])

    def wakes(self) -> int:
        """Context switches so far of the live threads of the supervisor and its workers: how
        often they woke, a count a busy machine does not blur as it does CPU time."""
        assert self.process is not None
        return sum(thread_wakes(pid) for pid in [self.process.pid, *self.worker_pids()])

    def rss_mb(self) -> float:
        """Resident memory of the supervisor and its workers together."""
        assert self.process is not None
        return sum(_rss_kb(pid) for pid in [self.process.pid, *self.worker_pids()]) / 1024


def broker_pid() -> int:
    """The local broker's process (benchmarks split CPU between kpd and the broker)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if "kafka.Kafka" in (proc / "cmdline").read_text():
                    return int(proc.name)
            except OSError:
                continue
    raise RuntimeError("no broker process")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far (all its threads), from /proc."""
    return _stat_cpu_s(Path(f"/proc/{pid}/stat"))


def thread_wakes(pid: int) -> int:
    """Voluntary and involuntary context switches so far of the live threads of `pid`."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def thread_cpu_s(pid: int, name_prefixes: tuple[str, ...]) -> float:
    """User + system CPU seconds so far of the threads of `pid` whose names start with one of
    `name_prefixes` (a thread that ended meanwhile is not counted)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if (task / "comm").read_text().startswith(name_prefixes):
                total += _stat_cpu_s(task / "stat")
    return total


def _stat_cpu_s(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")
