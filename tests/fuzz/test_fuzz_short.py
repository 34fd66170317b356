"""The short seeded fuzzing run of CI: a few hundred mutated and generated files, linted and fixed
by the real command; no traceback, no exit code 2, no hang, memory under the bound, and no fix
that breaks a file; files with control sequences in their lines and names, printed in every
human-readable format, with none of those printed unescaped. The deep-nesting and long-chain
generators run in benchmarks/fuzz.py."""

from __future__ import annotations

from tests.fuzz.harness import fuzz
from tests.fuzz.terminal import terminal_check


def test_short_fuzz_run_finds_no_crash_hang_or_blow_up():
    report = fuzz(seed=20261122, count=500, batch=125, deep=False, huge=True, timeout=240, memory_mb=1024)
    assert report.files == 500
    assert not report.failures, report.summary() + "".join(f"\n{f.kind}: {f.detail[:800]} {f.files[:10]}" for f in report.failures)


def test_short_terminal_check_prints_no_control_character():
    report = terminal_check(seed=20261126, count=120, batch=60, timeout=240)
    assert report.files == 120 and report.runs == 14
    assert not report.failed, report.summary() + "".join(f"\n{e[:800]}" for e in report.examples)
