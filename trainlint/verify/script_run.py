"""`trainlint verify run`: run a training script under the instruments, then judge its static findings.

This side never imports torch: it starts `trainlint.verify.instruments` in a child process, reads
the report it writes, and marks each static finding of the script confirmed or not by that evidence.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from trainlint.report.text import plural
from trainlint.diagnostics import Diagnostic
from trainlint.verify.nodes import Nodes, wait_for_reports
from trainlint.verify.journal import no_report, read_journal
from trainlint.verify.ranks import merge
from trainlint.verify.health import (
    FROZEN, divergence, failed_ourselves, format_bytes, frozen_cause, frozen_examples, grad_norm_spikes, never_cleared, partial,
)

Report = dict[str, Any]
LOW_PRECISION = ("bfloat16", "float16")
GRACE_S = 60.0  # for torch's import and the report, beyond the script's own timeout
# rules whose findings a run can confirm or not
JUDGED = frozenset({
    "TL101", "TL102", "TL104", "TL105", "TL202", "TL203", "TL204", "TL301", "TL302", "TL303", "TL304",
    "TL401", "TL402", "TL403", "TL404", "TL405", "TL406", "TL501", "TL502", "TL503",
})


def run_script(script: Path, args: Sequence[str], steps: int, timeout: float, device: str, nproc: int = 1, nodes: Nodes | None = None) -> Report:
    """The instruments' report for `script` run with `args`; the script's output goes to our stderr.

    With `nproc` > 1 the script runs under torch's elastic launcher (torchrun) in that many processes,
    the instruments in each, and their reports are merged (`ranks.merge`). With `nodes`, this is one
    node of a multi-node job: its ranks report to the shared gather folder, and node 0 merges the
    job's reports (the other nodes, their own ranks')."""
    env = dict(os.environ)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("PYTHONUNBUFFERED", "1")  # the script's prints appear as it runs
    with tempfile.TemporaryDirectory(prefix="trainlint-run-") as tmp:
        report_path = Path(tmp) / "report.json"
        if nodes is not None:
            nodes.gather.mkdir(parents=True, exist_ok=True)
            report_path = nodes.gather / "report.json"
        request = {
            "script": str(script), "args": list(args), "steps": steps, "timeout": timeout, "device": device,
            "report": str(report_path), "threads_set": "OMP_NUM_THREADS" in os.environ, "progress": _stderr_is_terminal(),
            "sessions": tmp, "node": nodes.rank if nodes is not None else 0,
            "journal": str(Path(tmp) / "steps.jsonl"),  # node-local, as the steps run: a line per step
        }
        # not `-m trainlint.verify.instruments`: the script runs as __main__, and torch.compile looks up
        # the instruments' globals in their module
        entry = "import sys; from trainlint.verify.instruments import main; main(sys.argv[1:])"
        if nproc > 1 or nodes is not None:
            # SIGTERM (the launcher stopping a rank) is blocked before any thread starts, so that the
            # instruments' own thread takes it and writes the rank's report (`distributed.py`)
            entry = "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); " + entry
            placement = nodes.launcher_options() if nodes is not None else ["--standalone"]
            launcher = [
                sys.executable, "-m", "torch.distributed.run", *placement, f"--nproc-per-node={nproc}", "--max-restarts=0",
                "--no-python", sys.executable,
            ]
            started, wall = time.monotonic(), time.time()
            code = _run_process_tree([*launcher, "-c", entry, json.dumps(request)], env, timeout + GRACE_S, Path(tmp), ranks_dir=Path(tmp))
            if nodes is None:
                return merge([_read_report(Path(f"{report_path}.rank{rank}")) for rank in range(nproc)], code, str(script))
            return _job_report(nodes, nproc, code, str(script), started + timeout + GRACE_S, wall)
        code = _run_process_tree([sys.executable, "-c", entry, json.dumps(request)], env, timeout + GRACE_S, Path(tmp))
        report = _read_report(report_path)
        if report is None:  # the process ended before the report: the steps that ran, from the journal
            report = no_report(str(script), code, timeout + GRACE_S, read_journal(Path(tmp) / "steps.jsonl"))
    return report


def _job_report(nodes: Nodes, nproc: int, code: int | None, script: str, deadline: float, since: float) -> Report:
    """Node 0: every rank of the job, merged (waiting for the other nodes' ranks until `deadline`).
    Another node: its own ranks', saying where the job's report is."""
    paths = wait_for_reports(nodes.gather, nodes.count * nproc, deadline if nodes.rank == 0 else time.monotonic(), since)
    reports = [_read_report(p) if p is not None else None for p in paths]
    if nodes.rank == 0:
        merged = merge(reports, code, script)
        merged["nodes"] = {"count": nodes.count, "gather": str(nodes.gather), "run_id": nodes.run_id}
        return merged
    own = [r for r in reports if r is not None and (r.get("distributed") or {}).get("node") == nodes.rank]
    merged = merge(own or [None], code, script)
    merged["nodes"] = {"count": nodes.count, "gather": str(nodes.gather), "run_id": nodes.run_id, "partial": True}
    merged["message"] = f"node {nodes.rank}: {merged.get('message')}; node 0 reports the whole job (its ranks' reports are in {nodes.gather})"
    return merged


def _read_report(path: Path) -> Report | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


SUPERVISOR = "import sys; from trainlint.verify.supervisor import main; main(sys.argv[1:])"
END_WITHIN_S = 30.0  # the supervisor's time to end the run's processes (its own limit is 20 s)
ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))  # no SIGHUP on Windows


class Interrupted(BaseException):
    """`verify run` got SIGTERM, SIGHUP or SIGINT while the script ran: every process of the run is
    ended; the command should end as the signal would have ended it (`end_as_signalled`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def end_as_signalled(signum: int) -> None:
    """End this process by `signum` with its default action, as it would have ended without our
    handler (the shell, Slurm, a supervisor see the signal, not an exit status)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)  # where the signal's default action is not to end the process


class _Signals:
    """While the run lasts: SIGTERM, SIGHUP and SIGINT are noted, for the wait to end the run
    (a handler that raised could leave the clean-up half done). Signals ignored when we started
    (`nohup`) stay ignored; from a thread other than the main one nothing is installed."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in ENDING_SIGNALS:
                if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
                    self.previous[signum] = signal.signal(signum, self._note)
        return self

    def _note(self, signum: int, _frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def __exit__(self, *_: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def _run_process_tree(command: Sequence[str], env: dict[str, str], timeout: float, workdir: Path, ranks_dir: Path | None = None) -> int | None:
    """Run `command` under the supervisor (`supervisor.py`), which ends every process the run
    started (the script's workers, a child it forgot, one that left the run's session) once the
    command is done, times out, we get SIGTERM/SIGHUP/SIGINT (`Interrupted` is raised once the run is
    ended) or we die, even by SIGKILL; the command's exit code (None on timeout). torchrun starts
    each rank in a session of its own: the ranks name theirs in `ranks_dir` (`*.session`), and those
    are ended too where the supervisor cannot see them (no /proc)."""
    status_path = workdir / "status.json"
    with _Signals() as signals:
        # the supervisor ends the run when this pipe's write end closes: when we close it, or die
        control, keep = os.pipe()
        try:
            supervisor = subprocess.Popen(
                [sys.executable, "-c", SUPERVISOR, str(control), str(status_path), str(os.getpid()), *command],
                stdout=_script_output(), env=env, start_new_session=True, pass_fds=(control,),
            )
        except BaseException:
            os.close(keep)
            raise
        finally:
            os.close(control)
        finished = False
        try:
            finished = _wait(supervisor, timeout, signals)
        finally:
            os.close(keep)
            try:
                supervisor.wait(END_WITHIN_S)
            except subprocess.TimeoutExpired:  # a supervisor stuck: its first process dies with it (PR_SET_PDEATHSIG)
                _end_group(supervisor.pid)
                supervisor.wait()
            for session in sorted(ranks_dir.glob("*.session")) if ranks_dir is not None else []:
                try:
                    leader = int(session.read_text(encoding="ascii"))
                except (OSError, ValueError):
                    continue
                if _still_ours(leader):
                    _end_group(leader)
    if signals.received is not None:
        raise Interrupted(signals.received)
    if not finished:
        return None
    try:
        code = json.loads(status_path.read_text(encoding="utf-8"))["code"]
    except (OSError, ValueError, KeyError, TypeError):
        return supervisor.returncode
    return code if isinstance(code, int) else None


def _wait(process: subprocess.Popen[bytes], timeout: float, signals: _Signals) -> bool:
    """Whether `process` ended within `timeout` seconds, before one of the ending signals came."""
    deadline = time.monotonic() + timeout
    while signals.received is None:
        try:
            process.wait(max(0.0, min(0.1, deadline - time.monotonic())))
            return True
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return False
    return False


def _end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _still_ours(leader: int) -> bool:
    """The rank's session leader, or gone (its group's processes, if any are left, are still its:
    Linux does not reuse a pid that a live process group carries); not a stranger that took the pid."""
    try:
        with open(f"/proc/{leader}/cmdline", "rb") as cmdline:
            return b"trainlint.verify.instruments" in cmdline.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _script_output() -> Any:
    """The script's stdout goes to our stderr, so that our stdout holds only the report."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL


def judge(report: Report, diagnostics: Sequence[Diagnostic]) -> list[Report]:
    """Each static finding as a dict with a `verification` from the run's evidence (None: no runtime check)."""
    rows = []
    for d in diagnostics:
        row = d.to_dict()
        verdict = _verdict(report, d)
        row["verification"] = None if verdict is None else {"status": verdict[0], "summary": verdict[1]}
        rows.append(row)
    return rows


def _verdict(report: Report, d: Diagnostic) -> tuple[str, str] | None:
    steps = report.get("steps") or 0
    if failed_ourselves(report):
        return ("cannot check here", "trainlint's instruments failed: no evidence") if d.code in JUDGED else None
    if partial(report):
        return ("cannot check here", "the run ended before trainlint's report: no evidence but the steps' count") if d.code in JUDGED else None
    if steps == 0:
        return ("cannot check here", "no optimizer step ran") if d.code in JUDGED else None
    if d.code == "TL101":
        low = [r for r in report.get("frozen") or [] if r["dtype"] in LOW_PRECISION and r["frozen_fraction"] >= FROZEN]
        if low:
            return "confirmed", f"{plural(len(low), low[0]['dtype'] + ' tensor')} unchanged after {steps} steps though their gradients were non-zero: {frozen_examples(low)}{frozen_cause(low)}"
        return "not confirmed", f"every low-precision parameter moved in {steps} steps"
    if d.code in ("TL102", "TL104", "TL202", "TL204"):
        return _stability(report, steps)
    if d.code in ("TL301", "TL302"):
        graphs = report.get("graphs") or []
        growth = (report.get("saved_bytes") or {}).get("growth_per_step") or 0
        if graphs or growth > 0:
            parts = [f"`{g['name']}` grows by {g['growth_per_step']:.0f} autograd nodes per step{_holding(g)}" for g in graphs[:2]]
            if growth > 0:
                parts.append(f"tensors saved for backward grow by {format_bytes(growth)} per step")
            return "confirmed", "; ".join(parts)
        return "not confirmed", f"no variable's autograd graph grew over {steps} steps"
    if d.code in ("TL401", "TL402", "TL304", "TL403"):
        return _sync_verdict(report, d, steps)
    if d.code in ("TL105", "TL303", "TL406"):
        return _event_verdict(report, d, steps)
    if d.code == "TL203":
        scale = report.get("loss_scale") or {}
        if scale.get("scaled_losses") and not scale.get("updates"):
            return "confirmed", f"GradScaler.update() never ran: {scale['scaled_losses']} loss(es) scaled, the scale never adjusted"
        return "not confirmed", f"GradScaler.update() ran {plural(scale.get('updates', 0), 'time')} in {plural(steps, 'step')}"
    if d.code == "TL404":
        on = report.get("anomaly_steps") or []
        if on:
            return "confirmed", f"anomaly detection was on at {len(on)} of {steps} steps"
        return "not confirmed", f"anomaly detection was off at every one of {steps} steps"
    if d.code == "TL405":
        wait = report.get("data_wait")
        waited = f"; the steps waited {wait['per_step_s'] * 1e3:.2f} ms per step for data ({wait['fraction']:.0%} of the time)" if wait else ""
        if report.get("device") == "cpu":
            return "cannot check here", f"pinned memory and background loading pay off with copies to a GPU{waited}"
        if wait and wait["fraction"] >= 0.1:
            return "confirmed", waited.removeprefix("; ")
        return "not confirmed", f"the steps barely waited for data{waited}"
    if d.code == "TL501":
        if never_cleared(report):
            norm = report.get("grad_norm") or {}
            trend = f" (gradient norm {norm['first']:.3g} -> {norm['last']:.3g})" if norm.get("first") is not None else ""
            return "confirmed", f"no zero_grad() and no .grad reset in {steps} steps: gradients accumulated{trend}"
        return "not confirmed", "gradients were cleared between steps"
    if d.code == "TL502":
        early = report.get("scheduler_steps_before_first_step") or 0
        if early:
            return "confirmed", f"the LR scheduler stepped {plural(early, 'time')} before the first optimizer step: the schedule's first value was skipped"
        return "not confirmed", "the LR scheduler did not step before the first optimizer step"
    if d.code == "TL503":
        evals = report.get("eval_mode_steps") or []
        if evals:
            return "confirmed", f"the model was in eval mode at {len(evals)} of {steps} optimizer steps, from step {evals[0]}"
        return "not confirmed", f"the model was in training mode at every one of {steps} steps"
    return None


EVENT_KINDS = {
    "TL105": ("backward inside autocast",),
    "TL303": ("forward in eval mode with autograd on", "forward with autograd on"),
    "TL406": ("host-to-device copy",),
}


def _event_verdict(report: Report, d: Diagnostic, steps: int) -> tuple[str, str]:
    rows = [e for e in _at_line(report.get("events") or [], d) if e["kind"] in EVENT_KINDS[d.code]]
    if d.code == "TL406":
        if any(e["every_step"] for e in rows):
            e = next(e for e in rows if e["every_step"])
            return "confirmed", f"a host-to-device copy ran {e['per_step']:.3g} {'time' if e['per_step'] == 1 else 'times'} per step"
        if report.get("device") == "cpu":
            return "cannot check here", "on the CPU there is no copy to a device"
        return "not confirmed", "no host-to-device copy at this line on every step"
    if rows:
        e = rows[0]
        return "confirmed", f"{e['kind']}: {plural(e['count'], 'time')} in {plural(steps, 'step')}"
    if d.code == "TL303":
        return "not confirmed", f"this forward did not run with autograd on in {steps} steps (evaluation may come later: raise --steps)"
    return "not confirmed", f"no backward ran inside autocast at this line in {steps} steps"


def _holding(graph: Report) -> str:
    held = graph.get("saved_bytes_at_end")
    return f" ({format_bytes(held)} saved for backward after step {len(graph['nodes'])})" if held else ""


def _at_line(rows: Sequence[Report], d: Diagnostic) -> list[Report]:
    path = os.path.abspath(d.path)
    return [r for r in rows if r["path"] == path and d.line <= r["line"] <= (d.end_line or d.line)]


def _stability(report: Report, steps: int) -> tuple[str, str]:
    bad = [
        f"{what.replace('_', ' ')} non-finite at step {report[what]['nonfinite_steps'][0]}"
        for what in ("loss", "grad_norm") if (report.get(what) or {}).get("nonfinite_steps")
    ]
    spikes = grad_norm_spikes(report)
    if spikes:
        bad.append(f"gradient-norm spike of {spikes['first']:.4g} at step {spikes['steps'][0]} ({spikes['first'] / spikes['median']:.0f}x the median)")
    rise = divergence(report)
    if rise:
        bad.append(f"the loss diverged from step {rise['began']} ({rise['baseline']:.4g} -> {rise['last']:.4g})")
    if report.get("nonfinite_parameters"):
        bad.append(f"non-finite parameters ({', '.join(report['nonfinite_parameters'][:3])})")
    if bad:
        return "confirmed", "; ".join(bad)
    top = (report.get("grad_norm") or {}).get("max")
    peak = f" (largest gradient norm {top:.3g})" if isinstance(top, (int, float)) else ""
    return "not confirmed", f"loss, gradients and parameters stayed finite for {steps} steps{peak}"


def _sync_verdict(report: Report, d: Diagnostic, steps: int) -> tuple[str, str]:
    at_line = _at_line(report.get("syncs") or [], d)
    every = [s for s in at_line if s["every_step"]]
    if every:
        s = every[0]
        return "confirmed", f"{s['kind']} ran {s['per_step']:.3g} {'time' if s['per_step'] == 1 else 'times'} per step, in {s['steps_seen']} of {s['steps_measured']} steps"
    if at_line:
        s = at_line[0]
        return "not confirmed", f"{s['kind']} ran in {s['steps_seen']} of {s['steps_measured']} steps only"
    cuda_only = d.code != "TL401" or d.facts.get("kind") == "host copy"
    if report.get("device") == "cpu" and cuda_only:
        return "cannot check here", "on the CPU this line does not run or syncs nothing (it needs CUDA)"
    return "not confirmed", f"no sync at this line in {steps} steps"
