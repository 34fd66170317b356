"""The fix-safety harness: every rule that offers a fix, on crafted variants, fixed and then run.

Each variant is a tiny CPU training script (and, where it matters, local modules beside it). It is
linted with its rule, fixed with the safe fixes through `fix_source` (what `--fix` runs), re-parsed,
and executed with torch before and after, in a fresh namespace of this process. A variant that
must get a safe fix has to get one, and the fixed program has to print exactly what the original
printed. A variant whose fix must not be safe has to get no safe fix (so `--fix` leaves it alone);
where the unsafe fix is known to break the program, applying it anyway must show that.

The scripts run on the CPU: device moves use `"cpu"` (a `.cuda()` or `"cuda"` in a variant is run
as `.cpu()` and `"cpu"`, before and after alike): the fix is only about which call carries the
device, and that is the same on any device.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from tests.fix_safety_unsafe_variants import UNSAFE_FIX_VARIANTS, Variant
from trainlint.config import Settings
from trainlint.diagnostics import Applicability
from trainlint.engine.lint import lint_source
from trainlint.engine.results import FileResult
from trainlint.fixes import fix_source
from trainlint.rules import ALL_RULES

pytest.importorskip("torch")


# -- TL406 host-tensor-moved-per-step: `torch.zeros(n).to(device)` -> `torch.zeros(n, device=device)`
MOVE_HEAD = """\
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.arange(6.0).reshape(2, 3) + i for i in range(3)]
made = []
"""
MOVE_LOOP = """\
for x in loader:
    optimizer.zero_grad()
{make}
    loss = model(x).sum() * t.double().sum()
    loss.backward()
    optimizer.step()
    made.append(t)
print([(m.tolist(), str(m.dtype), str(m.device), m.requires_grad) for m in made], model.weight.tolist())
"""


def move(name: str, make: str, safe: bool, head: str = 'device = "cpu"\n', imports: str = "import torch\n", **kw) -> Variant:
    """A step loop that builds `t` with `make` (the lines of the loop body) every step."""
    make = textwrap.indent(textwrap.dedent(make).strip("\n"), "    ")
    return Variant("TL406", name, imports + MOVE_HEAD + textwrap.dedent(head) + MOVE_LOOP.format(make=make), safe, **kw)


STEP_FUNCTION = """\
import torch

torch.manual_seed(0)
device = "cpu"
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
made = []{defs}


def train_step({params}):
    optimizer.zero_grad()
    {make}
    loss = model(x).sum() * t.sum()
    loss.backward()
    optimizer.step()
    made.append(t)


for i in range(3):
    train_step(torch.arange(6.0).reshape(2, 3) + i, device)
print([m.tolist() for m in made], model.weight.tolist())
"""

MOVES = [
    move("device-name", "t = torch.ones(3).to(device)", True),
    move("torch-device", "t = torch.full((3,), 0.5).to(device)", True, head='device = torch.device("cpu")\n'),
    move("cuda-method", "t = torch.tensor([1.0, 2.0, 3.0]).cuda()", True, head=""),
    move("device-keyword", "t = torch.arange(3).to(device=device)", True),
    move("non-blocking", "t = torch.eye(3).to(device, non_blocking=True)", True),
    move("literal-device", 't = torch.zeros(2, 3).to("cuda:0")', True, head=""),
    move("conditional-device", "t = torch.ones(2).to(device)", True,
         head='device = "cuda" if torch.cuda.is_available() else "cpu"\n'),
    move("multi-line-trailing-comment", """
        t = torch.zeros(
            3,  # width
        ).to(device)
        """, True),
    move("multi-line-comment-inside", """
        t = torch.full(
            (3,),  # shape
            2.0
        ).to(device)
        """, True),
    # two moves in one statement: one finding, whose fix creates both on the device
    move("one-statement-two-moves", """
        parts = {"a": torch.ones(3).to(device), "b": torch.full((3,), 0.5).to(device)}
        t = parts["a"] + parts["b"]
        """, True),
    move("alias-and-dtype", "t = th.ones(3, dtype=th.float64).to(device)", True, imports="import torch\nimport torch as th\n"),
    move("imported-factory", "t = zeros(3).to(device)", True, imports="import torch\nfrom torch import zeros\n"),
    move("another-tensors-device", "t = torch.ones(3).to(ref.device)", True, head="ref = torch.zeros(2)\n"),
    move("list-data", "t = torch.tensor([[1, 2], [3, 4]]).to(device)", True),
    move("as-tensor", "t = torch.as_tensor([1.0, 2.0]).to(device)", True),
    move("star-args", "t = torch.zeros(*shape).to(device)", True, head='device = "cpu"\nshape = (2, 3)\n'),
    move("integer-arange-of-a-shape", "t = torch.arange(x.shape[0]).to(device)", True),
    # the cast is no move: no finding, nothing to fix
    move("dtype-cast", "t = torch.tensor([1.5, 2.5]).to(torch.long)", False, fires=False),
    move("dtype-alias", "t = th.tensor([1.5, 2.5]).to(th.float64)", False, imports="import torch\nimport torch as th\n", fires=False),
    move("dtype-from-import", "t = torch.tensor([1.5, 2.5]).to(i64)", False, imports="import torch\nfrom torch import long as i64\n", fires=False),
    move("dtype-name", "t = torch.ones(3).to(dt)", False, head="dt = torch.float64\n", fires=False),
    move("dtype-keyword", "t = torch.ones(3).to(dtype=torch.float64)", False, fires=False),
    # `.to(other)` takes other's device *and* dtype
    move("other-tensor", "t = torch.tensor([1, 2, 3]).to(ref)", False, head="ref = torch.zeros(3, dtype=torch.float64)\n"),
    move("kwargs-with-device", "t = torch.zeros(3, **kw).to(device)", False,
         head='device = "cpu"\nkw = {"device": device}\n', unsafe="breaks"),
    move("requires-grad", "t = torch.ones(3, requires_grad=True).to(device)", False),
    move("random", "t = torch.randn(3).to(device)", False),
    move("linspace", "t = torch.linspace(0, 1, 5).to(device)", False),
    move("signal-window", "t = torch.hann_window(8).to(device)", False),
    move("tril-indices", "t = torch.tril_indices(3, 3).to(device)", True),
    move("float-arange", "t = torch.arange(0, 1, 0.25).to(device)", False),
    move("device-and-dtype", "t = torch.ones(3).to(device, torch.float64)", False),
    move("comment-in-the-move", """
        t = torch.ones(3).to(  # move it
            device
        )
        """, False),
    move("unknown-device", "t = torch.ones(3).to(cfg.device)", False, head='cfg = type("Cfg", (), {"device": "cpu"})\n'),
    move("loop-rebinds-device", """
        for device in ("cpu",):
            pass
        t = torch.ones(3).to(device)
        """, False),
    Variant("TL406", "device-parameter", STEP_FUNCTION.format(params="x, device", make="t = torch.ones(3).to(device)", defs=""), False),
    Variant("TL406", "parameter-rebound-on-one-path", STEP_FUNCTION.format(
        params="x, device, pin=False", make='if pin:\n        device = "cpu"\n    t = torch.ones(3).to(device)', defs=""), False),
    Variant("TL406", "global-rebound-elsewhere", STEP_FUNCTION.format(
        params="x, unused", make="t = torch.ones(3).to(device)",
        defs='\n\ndef use_host():\n    global device\n    device = "cpu"\n'), False),
]


# -- TL302 autograd-history-accumulated: `total += loss` -> `total += loss.detach()`
ACC_HEAD = """\
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]
"""
# each step backpropagates its loss; the total is only ever read as a number
ACC_LOOP = """\
{init}
for x in loader:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
{keep}
{after}
print(model.weight.tolist())
"""
# each step backpropagates the running total (through a helper): `.detach()` would break it
BACKPROP_LOOP = """\
total = 0.0
for x in loader:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    total += loss
{use}
    optimizer.step()
print(model.weight.tolist())
"""
# a step function keeps each loss in a list of the module, which other code reads
GLOBAL_HISTORY = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]
history = []


def train_step(x):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    {keep}
    optimizer.step()
{defs}

for x in loader:
    train_step(x)
{after}
"""


def kept(name: str, keep: str, after: str, safe: bool, init: str = "total = 0.0", imports: str = "", **kw) -> Variant:
    """A step loop that keeps each step's loss with `keep`, read after the loop by `after`."""
    body = ACC_LOOP.format(init=textwrap.dedent(init).strip("\n"), keep=textwrap.indent(textwrap.dedent(keep).strip("\n"), "    "),
                           after=textwrap.dedent(after).strip("\n"))
    return Variant("TL302", name, "import torch\n" + imports + ACC_HEAD + body, safe, **kw)


def backprop(name: str, use: str, imports: str = "", defs: str = "", modules: dict[str, str] | None = None) -> Variant:
    """A step loop whose running total is backpropagated every step by `use`: never safe to detach."""
    body = BACKPROP_LOOP.format(use=textwrap.indent(textwrap.dedent(use).strip("\n"), "    "))
    code = "import torch\n" + imports + ACC_HEAD + textwrap.dedent(defs) + body
    return Variant("TL302", name, code, False, {k: textwrap.dedent(v) for k, v in (modules or {}).items()}, unsafe="breaks")


TOTALS = [
    kept("printed-item", "total += loss", 'print(f"{total.item():.6f}")', True),
    kept("list-of-losses", "losses.append(loss)", "print([round(l.item(), 6) for l in losses])", True, init="losses = []"),
    kept("torch-stack", "losses.append(loss)", "print(torch.stack(losses).mean().item())", True, init="losses = []"),
    kept("logging-and-a-number", "total += loss", 'logging.info("total %s", total)\nprint(total.item())', True,
         imports="import logging\n"),
    kept("local-helper-that-reads", "total += loss", "report(total)", True,
         init='def report(value):\n    print("total", round(value.item(), 6))\n\n\ntotal = 0.0'),
    kept("helper-in-another-module-that-reads", "total += loss", "report(total)", True, imports="from metrics import report\n",
         modules={"metrics.py": 'def report(value):\n    print(f"total {value.item():.6f}")\n'}),
    kept("method-of-another-modules-class", "total += loss", "meter.show(total)", True,
         imports="from metrics import Meter\n", init="meter = Meter()\ntotal = 0.0",
         modules={"metrics.py": 'class Meter:\n    def show(self, value):\n        print("total", round(value.item(), 6))\n'}),
    kept("alias-then-item", "total += loss", "running = total\nprint(running.item())", True),
    kept("dict-of-totals", 'stats["loss"] += loss', 'print({k: round(v.item(), 6) for k, v in stats.items()})', True,
         init='stats = {"loss": 0.0}'),
    kept("keyword-argument-to-print", "total += loss", 'print("total", total.item(), sep="=")', True),
    kept("passed-to-a-number-helper", "total += loss", "print(average(total, len(loader)))", True,
         init="def average(value, n):\n    return value.item() / n\n\n\ntotal = 0.0"),
    # backpropagated later, elsewhere: the `.detach()` fix would break backward()
    backprop("helper-in-another-module-backpropagates", "backprop_running(total)", imports="from helpers import backprop_running\n",
             modules={"helpers.py": "def backprop_running(total):\n    total.backward(retain_graph=True)\n"}),
    backprop("local-helper-backpropagates", "backprop_running(total)",
             defs="def backprop_running(value):\n    value.backward(retain_graph=True)\n\n\n"),
    backprop("method-of-another-modules-class-backpropagates", "trainer.update(total)", imports="from engine import Trainer\n",
             defs="trainer = Trainer()\n",
             modules={"engine.py": "class Trainer:\n    def update(self, value):\n        value.backward(retain_graph=True)\n"}),
    backprop("package-re-export", "backprop_running(total)", imports="from pkg import backprop_running\n",
             modules={"pkg/__init__.py": "from .ops import backprop_running\n",
                      "pkg/ops.py": "def backprop_running(total):\n    total.backward(retain_graph=True)\n"}),
    backprop("through-another-helper", "step_on(total)", imports="from helpers import step_on\n",
             modules={"helpers.py": "def step_on(total):\n    _run(total * 1.0)\n\n\n"
                                    "def _run(value):\n    value.backward(retain_graph=True)\n"}),
    backprop("conditional-backward-in-helper", "maybe_backprop(total, True)", imports="from helpers import maybe_backprop\n",
             modules={"helpers.py": "def maybe_backprop(total, now):\n    if now:\n        total.backward(retain_graph=True)\n"}),
    backprop("unknown-callable", "callback(total)", defs="callback = lambda value: value.backward(retain_graph=True)\n"),
    backprop("callback-handed-to-a-helper", "apply_to(lambda value: value.backward(retain_graph=True), total)",
             imports="from helpers import apply_to\n", modules={"helpers.py": "def apply_to(fn, value):\n    return fn(value)\n"}),
    backprop("project-function-handed-to-a-builtin", "sorted([total], key=backprop_running)",
             imports="from helpers import backprop_running\n",
             modules={"helpers.py": "def backprop_running(total):\n    total.backward(retain_graph=True)\n"}),
    backprop("stored-by-one-helper-backpropagated-by-another", "keep(total)\nflush()", imports="from helpers import flush, keep\n",
             modules={"helpers.py": "KEPT = []\n\n\ndef keep(value):\n    KEPT.append(value)\n\n\n"
                                    "def flush():\n    KEPT.pop().backward(retain_graph=True)\n"}),
    Variant("TL302", "dict-entry-passed-to-a-helper", textwrap.dedent("""\
        import torch
        from helpers import backprop_running

        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]
        stats = {"loss": 0.0}
        for x in loader:
            optimizer.zero_grad()
            stats["loss"] += model(x).pow(2).mean()
            backprop_running(stats["loss"])
            optimizer.step()
        print(model.weight.tolist())
        """), False, {"helpers.py": "def backprop_running(total):\n    total.backward(retain_graph=True)\n"}, unsafe="breaks"),
    backprop("dict-entry-backpropagated", 'stats["loss"] = total\nstats["loss"].backward(retain_graph=True)', defs="stats = {}\n"),
    Variant("TL302", "module-list-read-as-numbers", GLOBAL_HISTORY.format(
        keep="history.append(loss)", defs="", after="print([round(h.item(), 6) for h in history])"), True),
    Variant("TL302", "module-list-backpropagated-by-another-function", GLOBAL_HISTORY.format(
        keep="history.append(loss)", defs="\n\ndef flush():\n    torch.stack(history).sum().backward()\n",
        after="flush()\nprint(model.weight.grad.tolist())"), False, unsafe="breaks"),
    Variant("TL302", "attribute-read-through-the-object", textwrap.dedent("""\
        import torch

        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]


        class Trainer:
            def __init__(self):
                self.total = 0.0

            def train_step(self, x):
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()
                self.total += loss
                optimizer.step()


        trainer = Trainer()
        for x in loader:
            trainer.train_step(x)
        trainer.total.backward()
        print(model.weight.grad.tolist())
        """), False, unsafe="breaks"),
    Variant("TL302", "returned-to-the-caller", textwrap.dedent("""\
        import torch

        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]


        def train_epoch(history):
            for x in loader:
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()
                history.append(loss)
                optimizer.step()


        history = []
        train_epoch(history)
        torch.stack(history).sum().backward()
        print(model.weight.grad.tolist())
        """), False, unsafe="breaks"),
]


# -- TL201 clip-before-unscale: `scaler.unscale_(optimizer)` inserted before the clip; it changes the
# gradients that are clipped (that is the point), so it is never safe, but it must leave a program
CLIP_HEAD = """\
import torch
{imports}
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
loader = [torch.arange(6.0).reshape(2, 3) / (i + 1) for i in range(3)]
"""
CLIP_LOOP = """\
for x in loader:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
{clip}
    scaler.step(optimizer)
    scaler.update()
print(model.weight.tolist())
"""


def clip(name: str, lines: str, imports: str = "", loop: str = CLIP_LOOP) -> Variant:
    body = loop.format(clip=textwrap.indent(textwrap.dedent(lines).strip("\n"), "    "))
    return Variant("TL201", name, CLIP_HEAD.format(imports=imports) + body, False, unsafe="runs")


CLIPS = [
    clip("norm", "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)"),
    clip("value", "torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)"),
    clip("imported-name", "clip_grad_norm_(model.parameters(), 0.5)", imports="from torch.nn.utils import clip_grad_norm_\n"),
    clip("module-alias", "nn_utils.clip_grad_norm_(model.parameters(), max_norm=0.5)", imports="import torch.nn.utils as nn_utils\n"),
    clip("multi-line-with-comment", """
        torch.nn.utils.clip_grad_norm_(
            model.parameters(),  # all of them
            0.5,
        )
        """),
    clip("gated", "if max_norm:\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)", imports="max_norm = 0.5\n"),
    clip("result-kept", "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\nprint(round(float(norm), 3))"),
    clip("semicolon-line", "grads_clipped = True; torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)"),
    clip("optimizer-keyword", "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)",
         loop=CLIP_LOOP.replace("scaler.step(optimizer)", "scaler.step(optimizer=optimizer)")),
    clip("in-a-step-function", "", loop="""\
def train_step(x):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5){clip}
    scaler.step(optimizer)
    scaler.update()


for x in loader:
    train_step(x)
print(model.weight.tolist())
"""),
    clip("parameter-list", "params = [p for p in model.parameters()]\ntorch.nn.utils.clip_grad_norm_(params, 0.5)"),
]

VARIANTS = [*MOVES, *TOTALS, *CLIPS, *UNSAFE_FIX_VARIANTS]


# -- running -----------------------------------------------------------------------------------
def _on_cpu(code: str) -> str:
    """The script as run here: on the CPU."""
    return code.replace(".cuda()", ".cpu()").replace('"cuda:0"', '"cpu"').replace('"cuda"', '"cpu"')


def _run(code: str, folder: Path) -> str:
    """What the script prints, run in a fresh namespace with its folder importable; or what it raised."""
    out = io.StringIO()
    loaded = set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(_on_cpu(code), str(folder / "train.py"), "exec"), {"__name__": "__main__"})
    except Exception as exc:  # what the fixed program raises is the finding
        return f"raised {type(exc).__name__}: {exc}"
    finally:
        sys.path.remove(str(folder))
        for name in set(sys.modules) - loaded:  # the variant's own modules: the next one has its own
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(folder)):
                del sys.modules[name]
    return out.getvalue()


def _write(folder: Path, variant: Variant) -> Path:
    for relative, text in variant.modules.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    path = folder / "train.py"
    path.write_text(variant.code)
    return path


def _lint_once() -> Callable[[str, str, Settings], FileResult]:
    """`lint_source`, remembering its results by text: the fixes are found twice on the same text."""
    known: dict[tuple[str, str], FileResult] = {}

    def lint(source: str, name: str, settings: Settings) -> FileResult:
        if (source, name) not in known:
            known[(source, name)] = lint_source(source, name, settings)
        return known[(source, name)]

    return lint


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.rule}-{v.name}")
def test_a_safe_fix_keeps_what_the_program_computes(variant: Variant, tmp_path: Path):
    path = _write(tmp_path, variant)
    settings = Settings(select=(variant.rule,), preview=True)
    lint = _lint_once()
    found = [d for d in lint(variant.code, str(path), settings).diagnostics if d.code == variant.rule]
    assert bool(found) == variant.fires, found
    safe = [d for d in found if d.fix is not None and d.fix.applicability is Applicability.SAFE]
    before = _run(variant.code, tmp_path)
    assert not before.startswith("raised"), before
    fixed = fix_source(variant.code, str(path), settings, unsafe=False, lint=lint)
    ast.parse(fixed.source)
    if variant.safe:
        assert safe, "a safe fix is offered"
        assert {d.code for d in fixed.applied} == {variant.rule} and not fixed.rejected, fixed.rejected
        assert fixed.source != variant.code
        assert _run(fixed.source, tmp_path) == before
    else:
        assert not safe, [d.fix for d in safe]
        assert fixed.source == variant.code, "--fix leaves it alone"
    if variant.unsafe is not None:
        forced = fix_source(variant.code, str(path), settings, unsafe=True, lint=lint)
        assert forced.applied, "the unsafe fix is offered"
        ast.parse(forced.source)
        after = _run(forced.source, tmp_path)
        if variant.unsafe == "breaks":  # and marking it unsafe was right
            assert after != before, "the unsafe fix changes nothing here: it could be safe"
        else:
            assert not after.startswith("raised"), after


def _rules_with_fixes() -> set[str]:
    """Rules whose code builds a fix."""
    return {rule.code for rule in ALL_RULES if "NodeFix(" in inspect.getsource(sys.modules[rule.__module__])}


def test_every_rule_that_offers_a_fix_has_ten_variants_each_way():
    rules = _rules_with_fixes()
    assert rules >= {"TL201", "TL302", "TL406"}
    counts = Counter(v.rule for v in VARIANTS)
    assert all(counts[code] >= 10 for code in rules), counts
    # where a rule has a safe fix, ten variants get one and ten must not
    for code in ("TL302", "TL406"):
        assert sum(v.safe for v in VARIANTS if v.rule == code) >= 10
        assert sum(not v.safe for v in VARIANTS if v.rule == code) >= 10
