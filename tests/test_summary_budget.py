"""Budgets per unit of work: a module's summary has a CPU budget of its own and never turns another
file into a TL000; deep but valid code does not hit Python's recursion limit. Through the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TRAIN = """\
import torch
from helpers import helper

def main(model, loader, optimizer):
    for x in loader:
        loss = model(x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        helper(loss)
"""


def _expensive_module(methods: int) -> str:
    """A valid module whose analysis takes seconds: a class whose methods each call the previous one
    (1500 methods: about 8 CPU-s, well over the 3 s the tests give, which leave the file linted room
    on a loaded machine)."""
    lines = ["import torch", "", "class Chain:"]
    for i in range(methods):
        lines += [f"    def m{i}(self, x, optimizer):", f"        y = x * {i}",
                  f"        z = y.item() + self.m{max(i - 1, 0)}(y, optimizer)", "        optimizer.step()", "        return z"]
    lines += ["", "def helper(x):", "    return x.item()", ""]
    return "\n".join(lines)


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainlint", "check", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_a_summary_over_its_budget_is_unknown_not_a_lost_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "helpers.py").write_text(_expensive_module(1500))
    (tmp_path / "train.py").write_text(TRAIN)
    done = _check(tmp_path, "train.py", "--file-timeout", "3")
    # the file itself is analysed (the old code charged the module's summary to it: a TL000 for its CPU time)
    assert "TL000" not in done.stdout, done.stdout
    assert "could not be analysed" not in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 module of the project could not be summarised within --file-timeout and was read as unknown: helpers.py." in done.stdout
    # named once, however many files read it
    (tmp_path / "train2.py").write_text(TRAIN)
    done = _check(tmp_path, "train.py", "train2.py", "--file-timeout", "3", "-j", "1")
    assert done.stdout.count("could not be summarised") == 1, done.stdout
    assert "TL000" not in done.stdout


def test_an_outcome_of_the_time_limit_is_not_cached(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "helpers.py").write_text(_expensive_module(1500))
    (tmp_path / "train.py").write_text(TRAIN)
    cache = tmp_path / "cache"
    for _ in range(2):  # a second run computes again: what it found depended on the machine
        done = subprocess.run([sys.executable, "-m", "trainlint", "check", "train.py", "--file-timeout", "3", "--cache-dir", str(cache)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert "could not be summarised" in done.stdout, done.stdout


def _chain_lines() -> list[str]:
    """700 functions each calling the previous one, and a step loop calling the last."""
    lines = ["import torch", "", "def f0(x):", "    return x + 1", ""]
    for i in range(1, 700):
        lines += [f"def f{i}(x):", f"    return f{i - 1}(x) + 1", ""]
    lines += ["def main(model, loader, optimizer):", "    for x in loader:", "        loss = model(x)", "        loss.backward()",
              "        optimizer.step()", "        print(loss.item())", "        f699(loss)", ""]
    return lines


def test_a_long_chain_of_calls_is_analysed_not_too_deep(tmp_path: Path) -> None:
    """700 functions each calling the previous one: valid code, deeper than the old recursion limit."""
    lines = _chain_lines()
    (tmp_path / "chain.py").write_text("\n".join(lines))
    done = _check(tmp_path, "chain.py", "--output-format", "json", "--file-timeout", "120")
    found = json.loads(done.stdout)
    assert [d["code"] for d in found if d["code"] == "TL000"] == [], found
    assert any(d["code"] == "TL501" for d in found), found  # and the analysis went on to its findings


def test_a_long_chain_of_calls_is_explained_and_read_from_stdin_not_too_deep(tmp_path: Path) -> None:
    """The commands that analyse in their own process (`explain FILE:LINE`, stdin) follow deep but
    valid code as the workers do."""
    lines = _chain_lines()
    (tmp_path / "chain.py").write_text("\n".join(lines))
    read = lines.index("        print(loss.item())") + 1
    done = subprocess.run([sys.executable, "-m", "trainlint", "explain", f"chain.py:{read}"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "nesting too deep" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Runs every training step: yes" in done.stdout, done.stdout
    done = subprocess.run([sys.executable, "-m", "trainlint", "--output-format", "json", "-"], cwd=tmp_path, input="\n".join(lines),
                          capture_output=True, text=True, timeout=600)
    assert [d["code"] for d in json.loads(done.stdout) if d["code"] == "TL000"] == [], done.stdout


def test_a_summary_another_worker_ran_out_of_budget_on_is_not_computed_again(tmp_path: Path) -> None:
    """The run's workers share what ran out: a second worker reads the module as unknown, named, at
    once, instead of spending the budget on it again (the installed torch package has dozens)."""
    from trainlint.project import budget, store
    from trainlint.project.index import Project
    from trainlint.reading import read_state

    (tmp_path / "pyproject.toml").write_text("")
    helpers = tmp_path / "helpers.py"
    helpers.write_text(_expensive_module(3))
    computed: list[str] = []
    original = store.log_computation
    store.log_computation = lambda path, state: computed.append(str(path))  # type: ignore[assignment]
    try:
        with store.sharing_summaries():
            store.mark_over_budget(store.shared_entry(helpers, read_state(str(helpers))[0]))
            budget.forget()
            summary = Project(tmp_path, 1).summary(helpers)
            assert computed == []
            assert budget.exceeded() == {str(helpers)}
            assert summary.classes["Chain"].methods == {} and summary.functions == {}  # (names only: unknown)
        budget.forget()
        assert Project(tmp_path, 1).summary(helpers).functions  # (no run's mark: computed, in full)
        assert computed == [str(helpers)]
    finally:
        store.log_computation = original  # type: ignore[assignment]
        budget.forget()


def test_two_workers_spend_the_budget_on_a_module_once(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "helpers.py").write_text(_expensive_module(1500))
    for i in range(4):
        (tmp_path / f"train{i}.py").write_text(TRAIN)
    log = tmp_path / "summaries.log"
    done = subprocess.run([sys.executable, "-m", "trainlint", "check", "--no-cache", ".", "--file-timeout", "3", "-j", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TRAINLINT_SUMMARY_LOG": str(log)})
    assert done.stdout.count("could not be summarised") == 1, done.stdout
    assert "TL000" not in done.stdout
    helpers = [line for line in log.read_text().splitlines() if line.split("\t")[0].endswith("helpers.py")]
    assert len(helpers) == 1, log.read_text()  # (both workers needed it: the second read the first's mark)
