"""Stand-in roles for the supervisor and conductor tests: they step until told they were fenced."""

from __future__ import annotations

import threading
import time

from foundation.supervision import LoopHealth


class SteppingRole:
    """Steps quietly until `fenced` is set, then fails as a fenced producer would."""

    def __init__(self, name: str = "role", shard: int = 0) -> None:
        self.name, self.shard = name, shard
        self.fenced = threading.Event()
        self.closed = False
        self.health = LoopHealth(name, shard)  # the supervisor's, where its make passes it

    def start(self) -> None:
        pass

    def step(self) -> None:
        if self.fenced.is_set():
            raise RuntimeError("fenced")
        time.sleep(0.005)

    def close(self) -> None:
        self.closed = True


class HandingRole(SteppingRole):
    """A role that can hand over (`foundation.supervision.HandsOver`), as a delay leader can."""

    def __init__(self, name: str = "role", shard: int = 0) -> None:
        super().__init__(name, shard)
        self.handing_over = False

    def hand_over(self) -> None:
        self.handing_over = True


class HeldRole(HandingRole):
    """A role whose start (a delay leader reading its shard, a standby catching up) lasts until
    the test lets it end."""

    def __init__(self, name: str = "role", shard: int = 0) -> None:
        super().__init__(name, shard)
        self.may_start = threading.Event()

    def start(self) -> None:
        assert self.may_start.wait(5)


class FencingRole(HandingRole):
    """Starts as a pop service or delay leader does: it fences its two transactional ids one at
    a time (`ProducersInTurn.init_transactions`), each init held until the test lets it end."""

    def __init__(self, name: str = "role", shard: int = 0) -> None:
        super().__init__(name, shard)
        self.fences_begun = 0
        self.may_end_fence = threading.Event()

    def start(self) -> None:
        for _ in range(2):
            with self.health.fencing():
                self.fences_begun += 1
                assert self.may_end_fence.wait(5)
