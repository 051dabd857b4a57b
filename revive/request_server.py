"""How a pop-service step serves the requests it drained from its inbox: each by its kind, in
the order they came, its answer kept in the step until the step's transaction commits.

A pop or a seek first finds its group's fetcher (made on the group's first call here); a pop
then moves what that fetcher has read into lanes, a seek finds its new offsets. A failure there
concerns that request alone, since nothing is leased or moved yet: only its future fails.
Whatever may move a replay floor or give a group its first offsets says so (`floors_may_move`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from revive.ack_produce import ack_and_produce
from revive.forget import forget_group
from revive.group_fetchers import GroupFetchers
from revive.lease import Leaser
from revive.offsets import OffsetCommitter
from revive.pop_state import PopState
from revive.pop_step import PopStep, Unwritten
from revive.requests import AckProduceRequest, ForgetRequest, Look, PopRequest, Request, SeekRequest
from revive.seek import Seeker
from revive.settle import Settler


class RequestServer:
    def __init__(
        self,
        state: PopState,
        handlers: tuple[Leaser, Settler, Seeker],
        parts: tuple[GroupFetchers, OffsetCommitter, Unwritten],  # what a forget changes too
        on_available: Callable[[str, str], None],  # (group, topic): records arrived for it
        floors_may_move: Callable[[], None],
    ) -> None:
        self._state, self._parts = state, parts
        self._leaser, self._settler, self._seeker = handlers
        self._fetchers = parts[0]
        self._on_available, self._floors_may_move = on_available, floors_may_move

    def serve(self, requests: list[tuple[Request, Future[Any]]], step: PopStep) -> None:
        """Serve `requests` in order; their answers wait in `step.answers`."""
        for request, future in requests:
            if isinstance(request, PopRequest):
                self._pop(request, future, step)
            elif isinstance(request, SeekRequest):
                self._seek(request, future, step)
            elif isinstance(request, ForgetRequest):
                answer = forget_group(request.group, self._state, self._parts, step)
                step.answers.append((future, answer))
            elif isinstance(request, Look):
                step.answers.append((future, None))
            elif isinstance(request, AckProduceRequest):
                step.answers.append((future, ack_and_produce(request, self._state, step)))
            else:
                step.answers.append((future, self._settler.settle(request, step)))

    def _pop(self, request: PopRequest, future: Future[Any], step: PopStep) -> None:
        try:  # nothing is leased yet: a failure here concerns this request only
            if not self._fetchers.knows(request.group, request.topic):  # offsets may be unsent
                self._floors_may_move()
            fetcher = self._fetchers.for_pop(request.group, request.topic)
            if self._fetchers.fetch(request.group, fetcher, self._on_available):
                self._floors_may_move()
        except Exception as error:
            future.set_exception(error)
            return
        step.answers.append((future, self._leaser.lease(request, fetcher, step)))

    def _seek(self, request: SeekRequest, future: Future[Any], step: PopStep) -> None:
        try:  # the group's fetcher and the new offsets: nothing has changed yet
            fetcher = self._fetchers.for_pop(request.group, request.topic)
            moved = self._seeker.positions(fetcher, request)
        except Exception as error:
            future.set_exception(error)
            return
        self._floors_may_move()
        step.answers.append((future, self._seeker.seek(request, fetcher, moved, step)))
