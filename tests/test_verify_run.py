"""`trainlint verify run`: the examples' field-report scripts run under the instruments reproduce their
diagnosis, and the clean versions show nothing (CPU; the CUDA run skips without CUDA)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import process_alive, messages

torch = pytest.importorskip("torch")

from trainlint.diagnostics import Diagnostic, Severity  # noqa: E402
from trainlint.verify.health import problems  # noqa: E402
from trainlint.verify.script_run import judge  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CUDA = torch.cuda.is_available()


def verify_run(script: Path, *options: str, device: str = "cpu") -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--format", "json", "--device", device, *options],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def verdicts(report: dict[str, Any]) -> dict[str, str | None]:
    return {f["code"]: (f["verification"] or {}).get("status") for f in report["findings"]}


def write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def test_bf16_example_norm_weights_are_frozen():
    code, report, _ = verify_run(EXAMPLES / "bf16_lm.py", "--steps", "50")
    assert code == 1
    assert report["steps"] == 50 and report["stopped"] == "steps" and report["device"] == "cpu"
    frozen = {r["name"]: r for r in report["frozen"]}
    norms = [name for name in frozen if name.endswith("norm.weight")]
    assert len(norms) == 5  # two per block and the final norm
    assert all(frozen[n]["frozen_fraction"] == 1.0 and frozen[n]["dtype"] == "bfloat16" for n in norms)
    # the linear layers move: their small weights sit where bf16 is fine-grained
    assert all(r["frozen_fraction"] < 0.5 for name, r in frozen.items() if ".mix." in name or ".ffn." in name)
    assert verdicts(report)["TL101"] == "confirmed"
    assert any("frozen" in p for p in messages(report))
    # the loss is logged at `step % 50 == 0` only: a sync site, but not one per step
    (item,) = [s for s in report["syncs"] if s["kind"] == ".item()"]
    assert not item["every_step"] and item["steps_seen"] <= 1
    assert report["loss"]["nonfinite_steps"] == [] and len(report["grad_norm"]["values"]) == 50


def test_retain_graph_example_grows_its_graph_every_step():
    code, report, _ = verify_run(EXAMPLES / "energy_trainer.py", "--steps", "8")
    assert code == 1
    (history,) = report["graphs"]
    assert history["name"] == "self.history" and history["growth_per_step"] > 0
    assert history["nodes"] == sorted(history["nodes"])
    assert history["saved_bytes_at_end"] > 0
    assert report["saved_bytes"]["growth_per_step"] > 0
    found = verdicts(report)
    assert found["TL301"] == "confirmed" and found["TL302"] == "confirmed"
    # gradient accumulation over 2 micro-steps: `.item()` twice per optimizer step
    assert found["TL401"] == "confirmed"
    (item,) = [s for s in report["syncs"] if s["every_step"]]
    assert item["line"] == 31 and item["per_step"] == 2.0
    assert found["TL403"] == "cannot check here"  # guarded by torch.cuda.is_available()


ACCUMULATED_LOSS = """\
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


    def train(steps):
        total_loss = 0.0
        for step in range(steps):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total_loss += {accumulated}
        return total_loss


    train(100)
"""


@pytest.mark.parametrize("accumulated, grows", [("loss", True), ("loss.detach()", False)])
def test_a_running_loss_sum_keeps_graphs_unless_detached(tmp_path: Path, accumulated: str, grows: bool):
    script = write(tmp_path, "running_loss.py", ACCUMULATED_LOSS.format(accumulated=accumulated))
    code, report, _ = verify_run(script, "--steps", "6")
    names = [g["name"] for g in report["graphs"]]
    assert names == (["total_loss"] if grows else [])
    assert (code == 1) == grows
    assert verdicts(report).get("TL302") == ("confirmed" if grows else None)  # the static finding, confirmed


@pytest.mark.parametrize("name", ["trainer_fixed.py", "bf16_autocast_lm.py", "lora_frozen_base.py"])
def test_clean_examples_confirm_nothing(name: str):
    code, report, _ = verify_run(EXAMPLES / "clean" / name, "--steps", "20")
    assert code == 0, report["problems"]
    assert report["steps"] == 20 and report["problems"] == [] and report["graphs"] == []
    assert not any(s["every_step"] for s in report["syncs"])
    assert "confirmed" not in verdicts(report).values()


def test_fp16_adam_eps_goes_nan(tmp_path: Path):
    script = write(tmp_path, "fp16_adam.py", """\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Embedding(32, 8).half()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(100):
            loss = model(torch.tensor([1, 2, 3])).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """)
    code, report, _ = verify_run(script, "--steps", "3")
    assert code == 1
    assert report["nonfinite_parameters"] == ["weight"]  # the rows never looked up: 0 / (0 + 0)
    assert verdicts(report)["TL104"] == "confirmed"


def test_a_script_without_optimizer_step_times_out_with_a_clear_message(tmp_path: Path):
    script = write(tmp_path, "no_step.py", """\
        import time
        import torch
        w = torch.ones(3, requires_grad=True)
        (w * 2).sum().backward()
        time.sleep(60)
        """)
    code, report, _ = verify_run(script, "--timeout", "3")
    assert code == 2
    assert report["stopped"] == "timeout" and report["steps"] == 0
    assert "no optimizer step within 3 s" in report["message"]


def test_script_arguments_errors_exits_and_swallowed_stops(tmp_path: Path):
    swallow = write(tmp_path, "swallow.py", """\
        import sys
        import torch
        print("argv", sys.argv[1:])
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for _ in range(1000):
            try:
                p.sum().backward()
                opt.step()
                opt.zero_grad()
            except BaseException:
                print("swallowed")
        print("trained on")
        """)
    code, report, stderr = verify_run(swallow, "--steps", "4", "--", "--lr", "3")
    assert code == 0 and report["steps"] == 4 and report["stopped"] == "steps"
    assert "argv ['--lr', '3']" in stderr and "swallowed" in stderr and "trained on" not in stderr

    crash = write(tmp_path, "crash.py", """\
        import torch
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for i in range(10):
            p.sum().backward()
            opt.step()
            opt.zero_grad()
            if i == 2:
                raise ValueError("bad batch")
        """)
    code, report, stderr = verify_run(crash, "--steps", "10")
    assert report["stopped"] == "error" and report["steps"] == 3
    assert report["error"].startswith("ValueError: bad batch at ") and report["error"].endswith("crash.py:9")
    assert 'crash.py", line 9' in stderr and "instruments.py" not in stderr  # the script's traceback only
    assert code == 2  # healthy steps, but the script failed

    exits = write(tmp_path, "exits.py", "import sys\nsys.exit(4)\n")
    code, report, _ = verify_run(exits)
    assert code == 2 and report["stopped"] == "exit" and "status 4" in report["message"]


def test_syncs_inside_torch_are_not_the_script_s(tmp_path: Path):
    # AdamW reads its CPU `step` tensor with .item() inside torch; clip_grad_norm_ is torch's too
    script = write(tmp_path, "adamw.py", """\
        import torch
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(100):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            if loss > 100:
                print("diverged")
        """)
    code, report, _ = verify_run(script, "--steps", "5")
    assert [(s["line"], s["kind"], s["every_step"]) for s in report["syncs"]] == [(10, "bool(tensor)", True)]


@pytest.mark.skipif(CUDA, reason="checks the answer without CUDA")
def test_device_cuda_without_cuda_is_an_error(tmp_path: Path):
    code, report, _ = verify_run(EXAMPLES / "clean" / "trainer_fixed.py", device="cuda")
    assert code == 2 and report["steps"] == 0 and "no CUDA device" in report["message"]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_run_records_memory_and_syncs():
    code, report, _ = verify_run(EXAMPLES / "energy_trainer.py", "--steps", "8", device="cuda")
    assert report["device"] == "cuda" and code == 1
    assert report["cuda_memory"]["growth_per_step"] > 0
    found = verdicts(report)
    assert found["TL401"] == "confirmed" and found["TL403"] == "confirmed"


def diagnostic(code: str, line: int, **facts: object) -> Diagnostic:
    return Diagnostic(code, "name", "message", Severity.WARNING, "train.py", line, 5, line, 20, facts=facts)


def test_judge_matches_sync_sites_to_findings_by_line():
    path = str(Path("train.py").resolve())
    report = {
        "steps": 20, "device": "cpu", "frozen": [], "graphs": [], "saved_bytes": {"growth_per_step": 0},
        "syncs": [
            {"path": path, "line": 10, "kind": ".item()", "count": 19, "steps_seen": 19, "steps_measured": 19, "per_step": 1.0, "every_step": True},
            {"path": path, "line": 12, "kind": ".item()", "count": 2, "steps_seen": 2, "steps_measured": 19, "per_step": 0.1, "every_step": False},
        ],
    }
    rows = judge(report, [
        diagnostic("TL401", 10), diagnostic("TL401", 12), diagnostic("TL401", 14),
        diagnostic("TL401", 16, kind="host copy"), diagnostic("TL402", 18), diagnostic("TL201", 20),
    ])
    got = [(r["line"], (r["verification"] or {}).get("status")) for r in rows]
    assert got == [(10, "confirmed"), (12, "not confirmed"), (14, "not confirmed"), (16, "cannot check here"), (18, "cannot check here"), (20, None)]
    assert "in 2 of 19 steps" in rows[1]["verification"]["summary"]


def test_judge_low_precision_freezing_and_stability():
    frozen = [
        {"name": "norm.weight", "dtype": "bfloat16", "numel": 64, "frozen_fraction": 1.0},
        {"name": "head.weight", "dtype": "float32", "numel": 64, "frozen_fraction": 0.9},
    ]
    report = {"steps": 50, "frozen": frozen, "loss": {"nonfinite_steps": []}, "grad_norm": {"nonfinite_steps": [7, 8], "max": 3.0}}
    rows = judge(report, [diagnostic("TL101", 1), diagnostic("TL202", 2)])
    assert rows[0]["verification"]["status"] == "confirmed" and "norm.weight 100%" in rows[0]["verification"]["summary"]
    assert "head.weight" not in rows[0]["verification"]["summary"]  # fp32 is not TL101's doing
    assert rows[1]["verification"] == {"status": "confirmed", "summary": "grad norm non-finite at step 7"}
    assert [(p.code, p.message, p.step) for p in problems(report)] == [
        ("TLR101", "2 parameter tensors frozen: norm.weight 100%, head.weight 90%", None), ("TLR202", "grad norm non-finite at steps 7, 8", 7),
    ]
    healthy = {"steps": 50, "frozen": frozen[:0], "loss": {"nonfinite_steps": []}, "grad_norm": {"nonfinite_steps": [], "max": 3.0}}
    assert judge(healthy, [diagnostic("TL202", 2)])[0]["verification"]["status"] == "not confirmed"
    assert problems(healthy) == []


STEP_ORDER_BUGS = """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8)


    def evaluate():
        model.eval()
        with torch.no_grad():
            return sum(float(torch.nn.functional.mse_loss(model(x), y)) for x, y in list(loader)[:2])


    for epoch in range(3):
        scheduler.step()
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
                loss.backward()
            optimizer.step()
            if i == 2:
                evaluate()
"""

STEP_ORDER_FIXED = """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8)


    def evaluate():
        model.eval()
        with torch.no_grad():
            result = sum(float(torch.nn.functional.mse_loss(model(x), y)) for x, y in list(loader)[:2])
        model.train()
        return result


    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            loss.backward()
            optimizer.step()
            if i == 2:
                evaluate()
        scheduler.step()
"""


def test_step_order_bugs_are_confirmed_and_their_fixes_are_not(tmp_path: Path):
    code, report, _ = verify_run(write(tmp_path, "bugs.py", STEP_ORDER_BUGS), "--steps", "10")
    assert code == 1
    assert verdicts(report) == {"TL105": "confirmed", "TL501": "confirmed", "TL502": "confirmed", "TL503": "confirmed"}
    assert report["eval_mode_steps"] == list(range(4, 11))  # evaluate() runs after step 3
    assert report["zero_grad_calls"] == 0 and report["scheduler_steps_before_first_step"] == 1
    assert report["grad_norm"]["last"] > 2 * report["grad_norm"]["first"]  # accumulated gradients
    assert report["data_wait"]["per_step_s"] > 0
    assert [p["code"] for p in report["problems"]] == ["TLR501", "TLR106"]
    code, report, _ = verify_run(write(tmp_path, "fixed.py", STEP_ORDER_FIXED), "--steps", "10")
    assert code == 0 and report["problems"] == [] and report["findings"] == []
    assert report["eval_mode_steps"] == [] and report["zero_grad_calls"] == 10 and report["scheduler_steps_before_first_step"] == 0
    assert not [e for e in report["events"] if e["kind"] != "forward with autograd on"]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_the_run_ends_the_script_s_whole_process_tree(tmp_path: Path):
    pid_file = tmp_path / "spinner.pid"
    script = write(tmp_path, "spawns.py", f"""\
        import subprocess, sys
        import torch
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        # a child in a session of its own (a TensorBoard launcher) is the run's too
        detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(f"{{spinner.pid}} {{detached.pid}}")
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for _ in range(100):
            p.sum().backward()
            opt.step()
            opt.zero_grad()
        """)
    # stdout and stderr are pipes: `communicate` returns only when no process holds them open
    code, report, _ = verify_run(script, "--steps", "3")
    assert code == 0 and report["steps"] == 3
    assert not any(process_alive(int(pid)) for pid in pid_file.read_text().split())


def test_the_script_s_exit_status_and_syntax_errors_are_reported(tmp_path: Path):
    exits = write(tmp_path, "exits_late.py", """\
        import sys
        import torch
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for step in range(5):
            p.sum().backward()
            opt.step()
            opt.zero_grad()
        sys.exit(4)
        """)
    code, report, stderr = verify_run(exits, "--steps", "50")
    assert report["steps"] == 5 and report["stopped"] == "exit" and report["exit_code"] == 4
    assert code == 2 and "trainlint: the script exited with status 4" in stderr
    done = write(tmp_path, "exits_zero.py", exits.read_text().replace("sys.exit(4)", "sys.exit(0)"))
    code, report, _ = verify_run(done, "--steps", "50")
    assert code == 0 and report["exit_code"] == 0

    broken = write(tmp_path, "broken.py", "import torch\nfor step in range(3)\n    pass\n")
    code, report, stderr = verify_run(broken)
    assert code == 2 and report["stopped"] == "error" and report["error"].startswith("SyntaxError")
    assert report["error"].endswith("broken.py:2")
    assert stderr.lstrip().startswith(f'File "{broken}", line 2')
    assert "trainlint" not in stderr.split("SyntaxError")[0] and "runpy" not in stderr


def test_the_text_report_shows_the_script_s_text_literally(tmp_path: Path):
    """Every gloo error ends in `[/...pair.cc:553]`, which rich read as a closing tag (a MarkupError
    traceback, exit 1), and `[bold]` vanished as markup; control characters in the script's name, its
    parameters' names or its error were printed raw."""
    script = write(tmp_path, "peer\x1b[2J.py", r"""
        import torch
        model = torch.nn.Module()
        model.register_parameter("w[/x]\x1b]0;pwned\x07", torch.nn.Parameter(torch.ones(4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        for step in range(3):
            next(model.parameters()).sum().backward()
            opt.step()
            opt.zero_grad()
        raise RuntimeError("Connection closed by peer [/tmp/pair.cc:553] [bold]x[/bold] \x1b[2J\u202eevil")
        """)
    html = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--html", str(html)],
        capture_output=True, text=True, timeout=300,
    )
    shown = str(script).replace("\x1b", "\\x1b")
    error = r"RuntimeError: Connection closed by peer [/tmp/pair.cc:553] [bold]x[/bold] \x1b[2J\u202eevil at " + f"{shown}:10"
    assert done.returncode == 2 and "MarkupError" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{shown}: 3 optimizer steps on cpu") and lines[1] == f"  {error}"
    (problem,) = [line for line in lines if line.startswith("  - TLR104 ")]
    assert problem.endswith(r"from step 1: the learning rate is 0 (w[/x]\x1b]0;pwned\x07)")
    assert done.stderr.splitlines()[-1] == f"trainlint: the script raised an error (exit status 1): {error}"
    page = html.read_text(encoding="utf-8")
    assert r"w[/x]\x1b]0;pwned\x07" in page and "\x1b" not in page and "\u202e" not in page
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
