"""What an analysis depended on: a memo's states, noted whole, reach every watcher that reads them."""

from __future__ import annotations

from trainlint.project.watching import note, note_all, unwatched, watching

A = ("a.py", 1, "x")
B = ("b.py", 2, "y")
C = ("c.py", 3, "z")


def test_a_memo_s_states_noted_again_reach_each_watcher() -> None:
    memo = (A, B)
    with watching() as first:
        note_all(memo, C)
        note_all(memo)
    with watching() as outer:
        with watching() as inner:
            note_all(memo)
        assert inner == {A, B}
        note_all(memo)  # (already passed on by the inner watcher)
        with watching() as second:
            note_all(memo)  # a new watcher, which has seen nothing yet
        assert second == {A, B}
    assert first == {A, B, C}
    assert outer == {A, B}


def test_unwatched_reads_note_nothing() -> None:
    with watching() as seen:
        note(C)
        with unwatched():
            note_all((A,))
        note_all((B,))
    assert seen == {B, C}
