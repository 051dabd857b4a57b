"""A model of redrives over one DLQ partition: however runs with topic filters and counts
interleave, each dead letter goes back at most once, and a run with neither moves every one
left (`revive.redrive_position`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from revive.redrive_position import RedrivePosition

# A partition's dead letters: (offset, topic), offsets rising with gaps (transaction markers).
partitions = st.lists(st.tuples(st.integers(1, 3), st.sampled_from("ab")), max_size=40).map(
    lambda steps: [
        (sum(gap for gap, _ in steps[: i + 1]), topic) for i, (_, topic) in enumerate(steps)
    ]
)
runs = st.lists(st.tuples(st.sampled_from([None, "a", "b"]), st.integers(1, 10)), max_size=8)


def redrive(
    committed: tuple[int, str], letters: list[tuple[int, str]], topic: str | None, most: int
) -> tuple[tuple[int, str], list[int]]:
    """One run as `revive.redrive` makes it: read from the committed offset, commit the end."""
    position = RedrivePosition.decode(*committed)
    moved: list[int] = []
    for offset, origin in letters:
        if offset < committed[0]:
            continue
        if position.is_moved(offset):
            position.passed(offset)
        elif topic not in (None, origin) or len(moved) >= most:
            position.left(offset)
        else:
            position.moved_one(offset)
            moved.append(offset)
    return (position.next, position.encode()), moved


@given(partitions, runs)
def test_each_dead_letter_goes_back_at_most_once_and_a_full_run_takes_the_rest(
    letters: list[tuple[int, str]], plan: list[tuple[str | None, int]]
) -> None:
    committed, back = (0, ""), []
    for topic, most in plan:
        committed, moved = redrive(committed, letters, topic, most)
        assert all(topic in (None, dict(letters)[offset]) for offset in moved)
        back += moved
    assert len(back) == len(set(back))
    committed, moved = redrive(committed, letters, None, len(letters) + 1)
    assert sorted(back + moved) == [offset for offset, _ in letters]
    assert redrive(committed, letters, None, len(letters) + 1)[1] == []


def test_metadata_kpd_did_not_write_counts_as_none() -> None:
    for metadata in ("x", "5-3", "1-2,", "-1-2", "1-2-3"):
        assert RedrivePosition.decode(7, metadata) == RedrivePosition(7)
    assert RedrivePosition.decode(7, "3-4,9-12,8-8").moved == [(8, 8), (9, 12)]
