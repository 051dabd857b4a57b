"""When a watched member is taken for gone (`cluster.successor.Silence`): at once when nothing
listens, only after a longer silence when it may be alive, and longer again after a false alarm."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from cluster.links import Links, Probe
from cluster.successor import REFUSED_IN_A_ROW, SILENT_MAX_S, SILENT_S, Silence

R, S, A, L = Probe.REFUSED, Probe.SILENT, Probe.ANSWERED, Probe.LISTENING


def gone_after(probes: list[tuple[Probe, float]], silence: Silence | None = None) -> Probe | None:
    """Why `silence` takes its member for gone after hearing `probes` (outcome, time) in turn."""
    silence = silence or Silence()
    for probe, now in probes:
        silence.heard(probe, now)
    return silence.gone


def test_refused_connections_in_a_row_are_a_member_gone():
    in_a_row = [(R, 0.25 * i) for i in range(REFUSED_IN_A_ROW)]
    assert gone_after(in_a_row[:-1]) is None
    assert gone_after(in_a_row) is R


def test_silence_counts_only_once_it_lasted_its_allowance():
    short = [(S, 0.0), (S, 0.5), (S, 2.0), (S, SILENT_S - 0.01)]
    assert gone_after(short) is None
    assert gone_after([*short, (S, SILENT_S)]) is S


def test_a_refusal_among_timeouts_does_not_make_a_run_of_refusals():
    mixed = [(R, 0.0), (R, 0.25), (S, 0.75), (R, 1.0)]
    assert gone_after(mixed) is None
    # the silence still runs from the first probe that went unanswered
    assert gone_after([*mixed, (R, SILENT_S)]) is S


def test_an_answer_starts_the_silence_anew():
    answered = [(S, 0.0), (S, 2.0), (A, 2.5), (S, 3.0)]
    assert gone_after([*answered, (S, 3.0 + SILENT_S - 0.01)]) is None
    assert gone_after([*answered, (S, 3.0 + SILENT_S)]) is S


def test_a_member_taken_on_silence_that_answers_is_allowed_twice_the_silence():
    silence = Silence()
    assert gone_after([(S, 0.0), (S, SILENT_S)], silence) is S
    assert silence.heard(A, 4.0) is True  # a false alarm
    assert (silence.gone, silence.allowed_s) == (None, 2 * SILENT_S)
    assert gone_after([(S, 5.0), (S, 5.0 + SILENT_S)], silence) is None
    assert gone_after([(S, 5.0 + 2 * SILENT_S)], silence) is S


def test_a_member_that_was_refused_and_answers_again_was_restarted_not_a_false_alarm():
    silence = Silence()
    assert gone_after([(R, 0.0), (R, 0.25), (R, 0.5)], silence) is R
    assert silence.heard(A, 9.0) is False
    assert silence.allowed_s == SILENT_S


def test_the_allowed_silence_stops_growing_at_its_bound():
    silence, now = Silence(), 0.0
    for _ in range(10):
        assert gone_after([(S, now), (S, now + silence.allowed_s)], silence) is S
        silence.heard(A, now + silence.allowed_s)
        now += 100.0
    assert silence.allowed_s == SILENT_MAX_S


def test_an_accepted_connect_breaks_a_run_of_refusals_and_nothing_else():
    assert gone_after([(R, 0.0), (R, 0.25), (L, 0.5), (R, 0.75)]) is None
    assert gone_after([(L, 0.0), (L, 5.0), (L, 50.0)]) is None  # never silent by itself
    # nor does it end a silence: a paused process's kernel still accepts connections
    assert gone_after([(S, 0.0), (L, 1.0), (L, SILENT_S)]) is S


def test_a_connect_tells_a_listening_port_from_a_refused_one():
    links = Links(timeout_s=1)
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            url = f"http://127.0.0.1:{server.getsockname()[1]}"
            assert links.connect(url) is Probe.LISTENING and links.holds(url)
        assert links.connect(url) is Probe.REFUSED and not links.holds(url)
    finally:
        links.close()


def test_a_link_closes_the_moment_its_member_is_killed():
    """A blocking wait over the links wakes as the watched process dies (SIGKILL): the kernel
    closes its sockets; until then it waits its whole time."""
    member = subprocess.Popen(
        [sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    links = Links(timeout_s=1)
    try:
        url = f"http://127.0.0.1:{member.stdout.readline().strip()}"  # type: ignore[union-attr]
        assert links.connect(url) is Probe.LISTENING
        started = time.monotonic()
        assert links.wait(0.3) == set()
        assert time.monotonic() - started >= 0.3
        member.send_signal(signal.SIGKILL)
        started = time.monotonic()
        assert links.wait(10) == {url}
        assert time.monotonic() - started < 2
        assert not links.holds(url)
        # The kernel may release the accepted socket before the listening one: once the member
        # is reaped, both are gone.
        member.wait(10)
        assert links.connect(url) is Probe.REFUSED
    finally:
        member.kill()
        member.wait()
        links.close()


def test_a_wake_ends_a_wait():
    links = Links(timeout_s=1)
    try:
        links.wake()
        started = time.monotonic()
        assert links.wait(10) == set()
        assert time.monotonic() - started < 2
    finally:
        links.close()


# A member that accepts connections and never answers (its port on stdout).
LISTENER = """
import socket, time
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
held = [server.accept()[0] for _ in range(10)]
time.sleep(60)
"""
