"""A new pop leader's inherited groups are made in parallel and installed by the service thread."""

from __future__ import annotations

import threading

import pytest

from revive.resume import GroupResumer

GROUPS = {f"g{i}": {f"t{i}"} for i in range(4)}


def test_groups_are_made_at_once_and_each_installed_once() -> None:
    together = threading.Barrier(len(GROUPS), timeout=5)  # breaks unless all four run at once
    made_in: set[str] = set()

    def make(group: str, topics: set[str]) -> tuple[str, frozenset[str]]:
        together.wait()
        made_in.add(threading.current_thread().name)
        return group, frozenset(topics)

    resumer: GroupResumer[tuple[str, frozenset[str]]] = GroupResumer(threads=len(GROUPS))
    resumer.start(GROUPS, make)
    installed: dict[str, tuple[str, frozenset[str]]] = {}
    while len(installed) < len(GROUPS):
        resumer.install_ready(lambda group, made: installed.__setitem__(group, made) or None)
    assert installed == {g: (g, frozenset(t)) for g, t in GROUPS.items()}
    assert threading.current_thread().name not in made_in
    resumer.install_ready(lambda group, made: pytest.fail(f"{group} installed twice"))


def test_a_group_asked_for_is_waited_for_and_not_installed_again() -> None:
    release = threading.Event()

    def make(group: str, topics: set[str]) -> str:
        if group == "g0":
            release.wait(5)
        return group

    resumer: GroupResumer[str] = GroupResumer(threads=2)
    resumer.start(GROUPS, make)
    assert resumer.wait_for("unknown", 1) is None  # not inherited: the caller makes its own
    threading.Timer(0.2, release.set).start()
    assert resumer.wait_for("g0", 5) == "g0"
    assert resumer.wait_for("g0", 5) is None  # handed out once
    installed: list[str] = []
    resumer.close(installed.append)  # the three others, made but never installed, are closed
    assert sorted(installed) == ["g1", "g2", "g3"]


def test_a_failure_to_make_a_group_reaches_the_service_thread_and_close_skips_it() -> None:
    together = threading.Barrier(len(GROUPS) + 1, timeout=5)  # the four makes and this test

    def make(group: str, topics: set[str]) -> str:
        together.wait()
        if group == "g1":
            raise RuntimeError("broker gone")
        return group

    resumer: GroupResumer[str] = GroupResumer(threads=len(GROUPS))
    resumer.start(GROUPS, make)
    together.wait()  # every make is running, so none can be cancelled any more
    installed: list[str] = []
    with pytest.raises(RuntimeError, match="broker gone"):
        while True:
            resumer.install_ready(lambda group, made: installed.append(made))
    closed: list[str] = []
    resumer.close(closed.append)
    assert sorted(installed + closed) == ["g0", "g2", "g3"]  # g1 closed what it had made


def test_a_wait_that_times_out_leaves_the_group_to_close() -> None:
    release = threading.Event()
    resumer: GroupResumer[str] = GroupResumer(threads=1)
    resumer.start({"g0": {"t"}}, lambda group, topics: release.wait(5) and group)
    with pytest.raises(TimeoutError):
        resumer.wait_for("g0", 0.05)
    release.set()
    closed: list[str] = []
    resumer.close(closed.append)
    assert closed == ["g0"]
