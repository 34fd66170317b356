"""Run the probe of each finding in a child process with a timeout, and collect the verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Sequence

from trainlint.diagnostics import Diagnostic
from trainlint.verify.progress import Progress

# rules with a probe (kept here so that choosing probes never imports torch)
PROBED = frozenset(
    {"TL101", "TL102", "TL103", "TL104", "TL201", "TL202", "TL204", "TL301", "TL302", "TL304", "TL401", "TL402"}
    | {"TL205", "TL504", "TL505", "TL506", "TL507", "TL508", "TL509", "TL510", "TL511"}
)


def run_probe(code: str, facts: dict[str, object], device: str, timeout: float) -> dict[str, object]:
    """One probe's verdict: status, summary, evidence, device, duration; never raises."""
    env = dict(os.environ)
    if device in ("auto", "cpu"):
        env.setdefault("OMP_NUM_THREADS", "1")
    command = [sys.executable, "-m", "trainlint.verify.probes", code, json.dumps(facts), device]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "cannot check here", "summary": f"the probe did not finish within {timeout:g} s", "evidence": {}}
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "cannot check here", "summary": f"the probe failed: {last}", "evidence": {}}
    return json.loads(done.stdout.strip().splitlines()[-1])


def verify(diagnostics: Sequence[Diagnostic], device: str = "auto", timeout: float = 120.0, progress: bool = False) -> list[dict[str, object]]:
    """Each diagnostic as a dict with a `verification` object (None for rules without a probe).

    Findings with the same rule and facts share one probe run. With `progress`, a status line on
    stderr counts the findings done.
    """
    cache: dict[tuple[str, str], dict[str, object]] = {}
    out = []
    status = Progress(progress)
    for done, d in enumerate(diagnostics):
        status.show(f"trainlint: verifying finding {done + 1}/{len(diagnostics)} ({d.code})", force=True)
        row = d.to_dict()
        row["facts"] = d.facts
        if d.code in PROBED:
            key = (d.code, json.dumps(d.facts, sort_keys=True))
            if key not in cache:
                cache[key] = run_probe(d.code, d.facts, device, timeout)
            row["verification"] = cache[key]
        else:
            row["verification"] = None
        out.append(row)
    status.clear()
    return out
