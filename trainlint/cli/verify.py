"""`trainlint verify PATH...` (a probe per finding) and `trainlint verify run SCRIPT` (the script,
instrumented): the commands of the runtime verifier, which import torch only when they run."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from trainlint.cli.common import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, DefaultGroup, _warn, _warn_lines
from trainlint.report.render import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from trainlint.config import Settings
    from trainlint.diagnostics import Diagnostic


@click.group("verify", cls=DefaultGroup, default="probes")
def verify_group() -> None:
    """Confirm findings by running code (needs `pip install trainlint[verify]`).

    `trainlint verify PATH...` runs a probe per finding; `trainlint verify run SCRIPT` runs a
    training script under instruments.
    """


def _need_torch() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        click.echo("trainlint: error: the verifier needs torch: `pip install 'trainlint[verify]'`", err=True)
        sys.exit(EXIT_ERROR)


def _settings_for(path: Path) -> Settings:
    from trainlint.config import ConfigError, find_config, load_settings

    try:
        return load_settings(find_config(path))
    except ConfigError as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)


def _lint_for_verify(paths: Sequence[Path]) -> list[Diagnostic]:
    from trainlint.engine.discovery import discover
    from trainlint.engine.lint import lint_paths

    settings = _settings_for(paths[0])
    targets = discover(list(paths), settings.root, settings.exclude)
    return [d for r in lint_paths([(t.path, settings) for t in targets]) for d in r.diagnostics]


def _console() -> Console:
    return make_console()


@verify_group.command("probes")
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED, metavar="PATH... [-- SCRIPT_ARGS...]")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where probes run (auto: CUDA when available).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, help="Seconds each probe may run.")
def verify_probes(arguments: tuple[str, ...], output_format: str, device: str, timeout: float) -> None:
    """Lint PATHS, then confirm or refute each finding by running a small torch experiment.

    Arguments after `--` are what the script would be run with: a value it reads from its command
    line (`--lr 3e-4`) is taken from them, else from the option's default, else assumed and said so.
    """
    paths, script_args = _paths_and_script_args(arguments)
    _need_torch()
    from trainlint.verify.runner import verify

    rows = verify(_lint_for_verify(paths or (Path("."),)), device, timeout, progress=sys.stderr.isatty(), script_args=script_args)
    if output_format == "json":
        import json

        click.echo(json.dumps(rows, indent=2))
    else:
        from trainlint.verify.report_text import render

        render(_console(), rows)
    confirmed = any((r["verification"] or {}).get("status") == "confirmed" for r in rows)
    sys.exit(EXIT_FINDINGS if confirmed else EXIT_CLEAN)


def _paths_and_script_args(arguments: Sequence[str]) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """PATHS up to the first argument that starts with "-" (click has consumed the `--` before it);
    the rest are the script's arguments. A path that does not exist is an error, as click says it."""
    split = next((i for i, a in enumerate(arguments) if a.startswith("-")), len(arguments))
    paths = tuple(Path(a) for a in arguments[:split])
    for path in paths:
        if not path.exists():
            raise click.BadParameter(f"Path '{path}' does not exist.", param_hint="'PATH...'")
    return paths, tuple(arguments[split:])


@verify_group.command("run")
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(min=1), default=50, show_default=True, help="Stop after this many optimizer steps.")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds the script may run.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="cpu hides CUDA from the script; cuda requires it.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=1, show_default=True, help="Run SCRIPT under torchrun in this many processes, instruments in each, and merge their evidence.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write the report as one self-contained HTML page.")
@click.option("--nnodes", type=click.IntRange(min=1), help="Nodes of a multi-node job (each runs this command once); read from SLURM under srun.")
@click.option("--node-rank", type=click.IntRange(min=0), help="This node's rank in the job (0 merges the job's report); SLURM_NODEID under srun.")
@click.option("--rdzv-backend", help="torchrun's rendezvous backend (default c10d).")
@click.option("--rdzv-endpoint", help="torchrun's rendezvous HOST:PORT; MASTER_ADDR:MASTER_PORT or SLURM's first node by default.")
@click.option("--rdzv-id", help="The job's id for the rendezvous; SLURM_JOB_ID under srun.")
@click.option("--gather-dir", type=click.Path(file_okay=False, path_type=Path),
              help="A folder every node can write (shared): the ranks' reports, merged by node 0 [default: ./.trainlint-verify-<rdzv-id>].")
@click.option("--acknowledge", "acknowledged", multiple=True, metavar="CODE",
              help="A problem code (TLR...) that is deliberate here: still reported, but not failing the run (repeatable; also `verify-acknowledge` in the configuration).")
def verify_run(
    script: Path, script_args: tuple[str, ...], steps: int, timeout: float, device: str, output_format: str, nproc: int, html_path: Path | None,
    nnodes: int | None, node_rank: int | None, rdzv_backend: str | None, rdzv_endpoint: str | None, rdzv_id: str | None, gather_dir: Path | None,
    acknowledged: tuple[str, ...],
) -> None:
    """Run SCRIPT unmodified (arguments after `--`) for N optimizer steps and report its training health.

    On several nodes (`--nnodes`, `--node-rank`, `--rdzv-*`, or SLURM's environment under `srun`),
    each node runs this command once; node 0 merges every rank's report into the job's report.

    Stops after N iterations: optimizer steps, and those a GradScaler skipped. Reports frozen parameters, non-finite losses and gradients, divergence and gradient-norm spikes,
    host-device syncs per step, autograd graphs kept across steps and step times, and marks the
    script's static findings confirmed or not. The script's own output goes to stderr. Exit code 2
    when the script failed (an error, a non-zero exit status), no optimizer step ran or trainlint's
    instruments failed; else 1 when a problem that is not acknowledged, or a finding, is confirmed;
    else 0. Each problem has a code (TLR101...) and a page under rules/run/; acknowledge a deliberate
    one with `# noqa: CODE` on the line it names, `# trainlint: noqa: CODE` in the script,
    `verify-acknowledge` in the configuration or `--acknowledge CODE`.
    """
    from trainlint.verify.nodes import NodesError, resolve
    from trainlint.verify.problem_kinds import acknowledge, unknown_codes

    try:
        nodes = resolve(nnodes, node_rank, rdzv_backend, rdzv_endpoint, rdzv_id, gather_dir)
    except (NodesError, ValueError) as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)

    settings = _settings_for(script)
    codes = [*settings.verify_acknowledge, *(c.upper() for c in acknowledged)]
    unknown = unknown_codes(codes)
    if unknown:
        _warn(f"no problem of `verify run` has the code {', '.join(unknown)} (codes look like TLR101; see rules/run/)", prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    _need_torch()
    from trainlint.verify.health import failed_ourselves, information, iterations, problems, script_failed
    from trainlint.verify.script_run import Interrupted, end_as_signalled, judge, run_script

    try:
        report = run_script(script, script_args, steps, timeout, device, nproc, nodes)
    except Interrupted as stop:
        try:
            _warn(f"ended by {signal.Signals(stop.signum).name}: the script and every process it started were stopped", prefix="trainlint: ")
        except OSError:  # SIGHUP: the terminal may be gone
            pass
        end_as_signalled(stop.signum)
    rows = judge(report, _lint_for_verify([script]))
    found = acknowledge(problems(report), codes, script)
    if output_format == "json":
        import json

        shown = {"problems": [p.to_dict() for p in found], "information": [p.to_dict() for p in information(report)]}
        click.echo(json.dumps({**report, "findings": rows, **shown}, indent=2))
    else:
        from trainlint.verify.report_text import render_run

        render_run(_console(), report, rows, found)
    if html_path is not None:
        from trainlint.verify.report_html import render_html

        try:
            html_path.write_text(render_html(report, rows, found), encoding="utf-8")
        except OSError as exc:
            _warn(f"cannot write {html_path}: {exc.strerror}", prefix="trainlint: error: ")
            sys.exit(EXIT_ERROR)
    failure = script_failed(report)
    if failed_ourselves(report):
        _warn(f"{report.get('message')}: {report.get('error') or 'no detail'}", prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    if failure:
        _warn_lines(failure, prefix="trainlint: ")
        sys.exit(EXIT_ERROR)
    confirmed = any((r["verification"] or {}).get("status") == "confirmed" for r in rows)
    if any(not p.acknowledged for p in found) or confirmed:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_ERROR if not iterations(report) else EXIT_CLEAN)
