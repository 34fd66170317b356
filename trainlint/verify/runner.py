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


def verify(
    diagnostics: Sequence[Diagnostic], device: str = "auto", timeout: float = 120.0, progress: bool = False, script_args: Sequence[str] = (),
) -> list[dict[str, object]]:
    """Each diagnostic as a dict with a `verification` object (None for rules without a probe).

    Findings with the same rule and facts share one probe run. With `progress`, a status line on
    stderr counts the findings done. `script_args` (what the script would be run with) settle values
    the script reads from its command line, such as a learning rate.
    """
    cache: dict[tuple[str, str], dict[str, object]] = {}
    out = []
    status = Progress(progress)
    for done, d in enumerate(diagnostics):
        status.show(f"trainlint: verifying finding {done + 1}/{len(diagnostics)} ({d.code})", force=True)
        row = d.to_dict()
        facts = with_learning_rate(d.facts, script_args)
        row["facts"] = facts
        if d.code in PROBED:
            key = (d.code, json.dumps(facts, sort_keys=True))
            if key not in cache:
                cache[key] = run_probe(d.code, facts, device, timeout)
            row["verification"] = cache[key]
        else:
            row["verification"] = None
        out.append(row)
    status.clear()
    return out


def with_learning_rate(facts: dict[str, object], script_args: Sequence[str]) -> dict[str, object]:
    """`facts` with the learning rate a probe should use and `lr_from`, where it came from: the
    script (a literal), its command line (`script_args`), the default of the option that sets it, or
    an assumption stated as one."""
    if "optimizer" not in facts or facts.get("lr") is not None:
        return facts
    options = [str(o) for o in facts.get("lr_options") or []]  # type: ignore[attr-defined]
    given = _option_value(script_args, options)
    if given is not None:
        return {**facts, "lr": given[1], "lr_from": f"the command line: {given[0]} {given[1]:g}"}
    if facts.get("lr_default") is not None:
        return {**facts, "lr": facts["lr_default"], "lr_from": f"the default of {options[0]}, not given after `--`" if options else "the option's default"}
    if facts.get("lr_expression"):
        return {**facts, "lr_from": f"assumed: the script's lr is `{facts['lr_expression']}`, unknown before it runs; give the script's arguments after `--`"}
    return {**facts, "lr_from": f"{facts['optimizer']}'s default"}


def _option_value(args: Sequence[str], options: Sequence[str]) -> tuple[str, float] | None:
    """The last value `args` give one of `options` (`--lr 3e-4` or `--lr=3e-4`), as a float."""
    found = None
    for i, arg in enumerate(args):
        name, _, inline = arg.partition("=")
        if name not in options:
            continue
        text = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
        try:
            found = (name, float(text))
        except ValueError:
            continue
    return found
