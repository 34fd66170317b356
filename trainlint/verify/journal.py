"""The steps journal: a line per optimizer step, written by the instrumented run as the step ends,
and read by `verify run` when the run ended without its report (the script ended the process with
`posix._exit()` or a crash in native code, or was killed, by the OOM killer say).

The report is built once, at the end: its figures need the device's values, and reading those each
step would add a host-device sync to the script's step. The journal holds what the host knows
without one: the steps' count, the iterations a GradScaler skipped, and when each step ended. Each
line is one `write()` to a file opened for appending, so a process that dies keeps every line it
wrote. No torch here.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
from pathlib import Path
from typing import Any

Report = dict[str, Any]


class StepJournal:
    """Appends the run's steps to `path` (nothing when `path` is None or cannot be written)."""

    def __init__(self, path: str | None, device: str) -> None:
        self.fd: int | None = None
        if path is not None:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            except OSError:
                return
            self._write({"device": device, "pid": os.getpid()})

    def step(self, steps: int, skipped: int, ended: float, first_forward: float | None) -> None:
        """Step (or skipped iteration) `steps + skipped` ended at `ended` s on the run's clock."""
        self._write({"steps": steps, "skipped": skipped, "t": round(ended, 6), "first_forward": first_forward})

    def _write(self, entry: Report) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (json.dumps(entry) + "\n").encode("utf-8"))
        except OSError:  # a full disk costs the journal, never the run
            self.fd = None


def read_journal(path: Path) -> Report | None:
    """What the journal at `path` says: `device`, `steps`, `skipped`, `ends` (each step's end), and
    `first_forward`; None when the run wrote none."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    found: Report = {"device": None, "steps": 0, "skipped": 0, "ends": [], "first_forward": None}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut short
            continue
        if not isinstance(entry, dict):
            continue
        if "device" in entry:
            found["device"] = entry["device"]
        if isinstance(entry.get("steps"), int):
            if entry["steps"] > found["steps"]:
                found["ends"].append(entry.get("t"))
            found["steps"], found["skipped"] = entry["steps"], entry.get("skipped") or 0
            if found["first_forward"] is None:
                found["first_forward"] = entry.get("first_forward")
    return found


def no_report(script: str, code: int | None, limit: float, journal: Report | None = None) -> Report:
    """The report of a run that wrote none: how its process ended and, from the steps `journal`
    when there is one, the steps that ran and their times (`partial`: nothing else was measured)."""
    if journal is None:
        return {
            "script": script, "steps": 0, "stopped": "no-report", "partial": True, "error": None, "exit_code": code if code is not None and code >= 0 else None,
            "message": f"the instrumented run {ended(code, limit)} and wrote no report",
        }
    how = ended(code, limit).replace("ended with exit code", "exited with status")
    steps = journal["steps"]
    return {
        "script": script, "device": journal["device"], "steps": steps, "skipped_steps": journal["skipped"], "stopped": "no-report", "partial": True,
        "ended": how, "error": None, "exit_code": code if code is not None and code >= 0 else None,
        "signal": _signal_name(-code) if code is not None and code < 0 else None,
        "message": f"the script {how} after {steps} optimizer steps, before trainlint's report: only the steps' count and times were kept",
        "step_time": _step_time(journal),
    }


def ended(code: int | None, limit: float = 0.0) -> str:
    """How a process ended, from its exit code (negative: the signal; None: still running at `limit` s)."""
    if code is None:
        return f"did not end within {limit:g} s"
    if code < 0:
        return f"was killed by {_signal_name(-code)}"
    return f"ended with exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _step_time(journal: Report) -> Report | None:
    """The step times as the report gives them (`Recorder._step_time`), from the steps' ends."""
    ends = [t for t in journal["ends"] if isinstance(t, (int, float))]
    if not ends:
        return None
    first = journal.get("first_forward")
    start = first if isinstance(first, (int, float)) and first < ends[0] else 0.0
    times = [ends[0] - start] + [b - a for a, b in zip(ends, ends[1:])]
    rest = statistics.median(times[1:]) if len(times) > 1 else None
    return {"values": [round(t, 6) for t in times], "first_s": times[0], "median_rest_s": rest}
