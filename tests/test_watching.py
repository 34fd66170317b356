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


def test_a_state_memo_gives_an_answer_again_after_forget_while_the_files_it_read_are_unchanged(tmp_path) -> None:
    from trainlint.project.store import StateMemo, forget_states
    from trainlint.reading import read_state

    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    memo: StateMemo[str, tuple[str, tuple]] = StateMemo(lambda answer: answer[1])
    memo["m"] = ("read once", (read_state(str(module))[0],))
    forget_states(), memo.forget()
    assert "m" not in memo and memo.get("m") == ("read once", (read_state(str(module))[0],))
    module.write_text("x = 2\n")
    forget_states(), memo.forget()
    assert memo.get("m") is None  # (the file changed: found afresh by the asker)
    memo["m"] = ("read again", (read_state(str(module))[0],))
    memo.forget(recheck=False)
    assert memo.get("m") is None
