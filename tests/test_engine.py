"""The engine: contained analysis of files that crash, hang or blow up the parser; the pre-check;
positions on demand; the GC pause. Through the real command where the behaviour is the user's."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from trainlint.config import Settings, rule_codes_on_disk
from trainlint.engine.lint import lint_source
from trainlint.model.walk import iter_nodes
from trainlint.model.positions import _TRIVIA, positions, statement_lines
from trainlint.engine.precheck import Limits, refuse

ROOT = Path(__file__).resolve().parent.parent
STEP = "import torch\nfor x, y in loader:\n    loss = model(x)\n    loss.backward()\n    optimizer.step()\n"
GOOD = """\
import torch
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.item()
"""
N = 10_000
DEEP = {
    "and_operands.py": "ok = " + " and ".join(f"a{i}" for i in range(N)) + "\n",
    "nested_dicts.py": "config = " + "{1: " * N + "1" + "}" * N + "\n",
    "elif_chain.py": "if x == 0:\n    pass\n" + "".join(f"elif x == {i}:\n    pass\n" for i in range(1, N)),
    "attribute_chain.py": "x = a" + ".b" * N + "\n",
    "implicit_strings.py": "text = (\n" + "".join('    "s"\n' for _ in range(N)) + ")\n",
}


# how a worker running libcst's native parser on 10,000 nested dicts ends
PARSER_LIMITS = ("the parser crashed (SIGSEGV)", "(--file-memory)", "(--file-timeout)")


def trainlint(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainlint", *args],
        capture_output=True, text=True, cwd=cwd, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def findings(proc: subprocess.CompletedProcess[str]) -> dict[str, list[tuple[str, int, str]]]:
    out: dict[str, list[tuple[str, int, str]]] = {}
    for d in json.loads(proc.stdout):
        out.setdefault(Path(d["path"]).name, []).append((d["code"], d["line"], d["message"]))
    return out


def deep_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for i in range(4):
        (folder / f"good_{i}.py").write_text(GOOD)
    for name, body in DEEP.items():
        (folder / name).write_text(STEP + body)
    return folder


def test_pathological_files_are_refused_before_parsing_and_the_rest_of_the_run_is_intact(tmp_path):
    folder = deep_folder(tmp_path)
    proc = trainlint(str(folder), "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    got = findings(proc)
    for name in DEEP:
        [(code, line, message)] = got[name]
        assert code == "TL000" and message.startswith("could not be analysed: "), message
        assert "syntax error" not in message
    alone = findings(trainlint(str(folder / "good_0.py"), "--format", "json", "--no-cache"))
    assert alone["good_0.py"] and all(got[f"good_{i}.py"] == alone["good_0.py"] for i in range(4))


def test_a_parser_crash_or_hang_costs_only_its_file(tmp_path):
    """With the pre-check's limits lifted, libcst segfaults or stalls: each such file gets a TL000."""
    folder = deep_folder(tmp_path)
    (folder / "pyproject.toml").write_text("[tool.trainlint]\nmax-line-length = 10000000\nmax-nesting = 100000\nmax-chain = 100000\n")
    proc = trainlint(str(folder), "--format", "json", "--no-cache", "--file-timeout", "3", "-j", "2")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenProcessPool" not in proc.stderr
    got = findings(proc)
    messages = {name: got[name][0][2] for name in DEEP}
    # 10,000 `and` operands are deep but valid: the workers' stack and recursion limit follow them
    assert [code for code, _, _ in got["and_operands.py"]] == ["TL501"]
    # a chain of 10,000 `elif`s is valid too: analysed in about 2.5 s of CPU time, so at this limit it is
    # found (TL501) or reported for its time, as fast as the machine goes
    assert got["elif_chain.py"][0][0] == "TL501" or "(--file-timeout)" in messages["elif_chain.py"], messages
    assert all(got[name][0][0] == "TL000" for name in DEEP if name not in ("and_operands.py", "elif_chain.py"))
    # libcst's native parser recurses on the main stack (256 MB now): it crashes, or reaches the memory
    # cap or the time limit first, as fast as the machine goes; a TL000 of this file alone, whichever
    assert any(why in messages["nested_dicts.py"] for why in PARSER_LIMITS), messages["nested_dicts.py"]
    assert "used more than 3 s of CPU time (--file-timeout)" in messages["attribute_chain.py"]
    assert "syntax error" not in messages["implicit_strings.py"]  # valid Python that libcst cannot parse
    alone = findings(trainlint(str(folder / "good_0.py"), "--format", "json", "--no-cache"))
    assert all(got[f"good_{i}.py"] == alone["good_0.py"] for i in range(4))


def test_a_file_over_the_memory_cap_gets_a_tl000_and_the_others_their_findings(tmp_path):
    big = (ROOT / "examples" / "energy_trainer.py").read_text()
    (tmp_path / "big.py").write_text(big * 400)
    (tmp_path / "good.py").write_text(GOOD)
    proc = trainlint(str(tmp_path), "--format", "json", "--no-cache", "--file-memory", "40")
    got = findings(proc)
    [(code, _, message)] = got["big.py"]
    assert code == "TL000" and "40 MB" in message
    assert got["good.py"] and got["good.py"] == findings(trainlint(str(tmp_path / "good.py"), "--format", "json"))["good.py"]
    assert "Traceback" not in proc.stderr


def test_a_file_under_max_file_size_too_big_for_the_memory_cap_is_refused_before_parsing(tmp_path):
    """3.6 MB of training code passed max-file-size (5 MB), was parsed for seconds until the memory
    cap aborted libcst, whose allocation message and backtrace reached the terminal."""
    (tmp_path / "big.py").write_text((ROOT / "examples" / "energy_trainer.py").read_text() * 1900)
    (tmp_path / "good.py").write_text(GOOD)
    proc = trainlint(str(tmp_path), "--format", "json", "--no-cache")
    got = findings(proc)
    [(code, _, message)] = got["big.py"]
    assert code == "TL000" and message.endswith("MB to parse, more than file-memory 1,024 MB"), message
    assert got["good.py"] and proc.stderr == ""


def test_a_parse_that_runs_into_the_memory_cap_says_so_and_prints_nothing(tmp_path, monkeypatch, capfd):
    import trainlint.engine.precheck as precheck
    from trainlint.engine.lint import lint_paths

    monkeypatch.setattr(precheck, "_BYTES_PER_TOKEN", 1)  # the estimate lets it through to the parser
    big = tmp_path / "big.py"
    big.write_text((ROOT / "examples" / "energy_trainer.py").read_text() * 400)
    [result] = lint_paths([(big, Settings(file_memory=40))], jobs=1)
    [diagnostic] = result.diagnostics
    assert diagnostic.message == "could not be analysed: needed more than 40 MB (--file-memory)"
    assert capfd.readouterr().err == ""


def test_a_file_whose_worker_waits_for_the_cpu_is_linted_not_timed_out(tmp_path, monkeypatch):
    """On a busy machine a valid file took 8.6 CPU-s but more than 20 s of wall-clock time and was
    reported as TL000: the limit counts CPU time. Here the analysis waits 2 s (no CPU) under a 1 s limit."""
    import time

    import trainlint.engine.lint as engine

    analyse = engine._analyse

    def waiting(*args, **kwargs):
        time.sleep(2)
        return analyse(*args, **kwargs)

    monkeypatch.setattr(engine, "_analyse", waiting)
    (tmp_path / "train.py").write_text(GOOD)
    [result] = engine.lint_paths([(tmp_path / "train.py", Settings(file_timeout=1))], jobs=1)
    assert result.diagnostics and not result.failed, [d.message for d in result.diagnostics]


def _stop(name: str, settings: Settings, data: bytes | None):
    import signal

    os.kill(os.getpid(), signal.SIGSTOP)


def test_a_worker_that_does_not_run_is_ended_by_the_wall_clock_backstop(monkeypatch):
    from trainlint.engine import worker_process, workers

    monkeypatch.setattr(worker_process, "WALL_CLOCK_FACTOR", 2.0)
    monkeypatch.setattr(worker_process, "WALL_CLOCK_SLACK", 0.0)
    [(_, result)] = list(workers.run([("stopped.py", Settings(file_timeout=0.5), None)], 1, _stop, lambda s: s.file_timeout, lambda s: 100))
    [diagnostic] = result.diagnostics
    assert diagnostic.message == (
        "could not be analysed: ran 1 s of wall-clock time without using its 0.5 s of CPU time (--file-timeout): "
        "the machine is overloaded or the worker was stopped"
    )
    assert not result.cacheable


def test_implicitly_concatenated_strings_are_not_called_a_syntax_error():
    source = STEP + "text = (" + " ".join('"s"' for _ in range(N)) + ")\n"
    limits = dict(max_line_length=10**7, max_nesting=10**6, max_chain=10**6)
    [diagnostic] = lint_source(source, "train.py", Settings(**limits)).diagnostics
    assert diagnostic.code == "TL000" and "syntax error" not in diagnostic.message
    assert "rejects this valid file" in diagnostic.message
    [diagnostic] = lint_source(STEP + DEEP["implicit_strings.py"], "train.py", Settings()).diagnostics
    assert "max-chain" in diagnostic.message


@pytest.mark.parametrize(
    "source, word",
    [
        ("x = " + "(" * 150 + "1" + ")" * 150 + "\n", "max-nesting"),
        ("x = f" + "()" * 600 + "\n", "max-chain"),
        ("x = " + "-" * 600 + "a\n", "max-chain"),
        ("x = (a\n" + "    + b\n" * 600 + ")\n", "max-chain"),
        ("x = '" + "a" * 30_000 + "'\n", "max-line-length"),
    ],
)
def test_the_pre_check_names_the_limit_a_file_exceeds(source, word):
    assert word in (refuse(source, Limits()) or "")


def test_an_over_long_line_is_refused_before_it_is_tokenized(monkeypatch):
    """A 1 MB list literal on one line: the tokenizer is quadratic in a line's length (about 30 s)."""
    import trainlint.engine.precheck as precheck

    def no_tokens(*args, **kwargs):
        raise AssertionError("tokenized an over-long line")

    monkeypatch.setattr(precheck.tokenize, "_generate_tokens_from_c_tokenizer", no_tokens)
    literal = "data = [" + ", ".join(str(i) for i in range(150_000)) + "]\n"
    assert len(literal) > 1_000_000
    [diagnostic] = lint_source(STEP + literal, "train.py", Settings()).diagnostics
    assert diagnostic.code == "TL000"
    assert diagnostic.message == f"could not be analysed: line 6 has {len(literal) - 1:,} characters (max-line-length 20,000)"


def test_the_pre_check_clears_real_code():
    for path in [*ROOT.glob("trainlint/**/*.py"), *ROOT.glob("examples/*.py"), *ROOT.glob("tests/*.py")]:
        assert refuse(path.read_text(), Limits()) is None, path


def _real_files() -> list[Path]:
    """A fixed quarter of the project's own modules and the examples: over 50,000 nodes of real code,
    without resolving libcst's positions for the whole tree (minutes, growing with the project)."""
    return sorted([*ROOT.glob("trainlint/**/*.py"), *ROOT.glob("tests/test_*.py")])[::4] + sorted(ROOT.glob("examples/*.py"))


def test_positions_are_those_of_libcst_position_provider_for_every_node_of_real_files():
    checked = 0
    for path in _real_files():
        source = path.read_text()
        module = cst.parse_module(source)
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        nodes = [n for n in iter_nodes(module) if n in reference and not isinstance(n, (*_TRIVIA, cst.Module))]
        assert positions(module, source, nodes) == {n: reference[n] for n in nodes}, path
        checked += len(nodes)
    assert checked > 50_000


def test_positions_of_a_few_nodes_are_found_without_regenerating_the_module(monkeypatch):
    """The usual case: a handful of findings, looked up by their text and their statement alone."""
    import random

    import trainlint.model.positions as module_positions

    def no_whole_module(*args, **kwargs):
        raise AssertionError("the whole module was regenerated")

    rng = random.Random(13)
    for path in _real_files():
        source = path.read_text()
        module = cst.parse_module(source)
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        nodes = [n for n in iter_nodes(module) if n in reference and not isinstance(n, (*_TRIVIA, cst.Module))]
        monkeypatch.setattr(module_positions, "MetadataWrapper", no_whole_module)
        for size in (1, 3, 10):
            chosen = rng.sample(nodes, min(size, len(nodes)))
            assert positions(module, source, chosen) == {n: reference[n] for n in chosen}, path
        monkeypatch.undo()


def test_the_lines_of_functions_are_those_of_their_positions_in_real_files():
    """A finding's call chains are those of the innermost function whose lines hold it: those lines,
    read from CPython's tree, are the first and last line of libcst's range of the function."""
    checked = 0
    for path in _real_files():
        source = path.read_text()
        module = cst.parse_module(source)
        functions = [n for n in iter_nodes(module) if isinstance(n, cst.FunctionDef)]
        lines = statement_lines(module, source, functions)
        if lines is None:  # (a function in an `else` or a handler: the caller asks for positions)
            continue
        exact = positions(module, source, functions)
        assert lines == {n: (exact[n].start.line, exact[n].end.line) for n in functions}, path
        checked += len(functions)
    assert checked > 500


def test_function_lines_start_at_the_def_and_end_at_the_last_statement():
    source = (
        "@decorate(\n    arg=1,\n)\ndef outer(x):\n    def inner(y): return y.item()\n\n    return inner(x)  # done\n"
        "    # a trailing comment\n\n\nif ready:\n    def gated():\n        pass\nelse:\n    def other():\n        pass\n"
    )
    module = cst.parse_module(source)
    outer = module.body[0]
    inner = outer.body.body[0]
    gated = module.body[1].body.body[0]
    assert statement_lines(module, source, [outer, inner, gated]) == {outer: (4, 7), inner: (5, 5), gated: (12, 13)}
    other = module.body[1].orelse.body.body[0]
    assert statement_lines(module, source, [other]) is None  # (an `else` is not searched: positions are asked)


def test_positions_fall_back_to_libcst_for_code_python_cannot_compile():
    source = "def f[T](x: T) -> T:\n    return x.backward()\n" if sys.version_info < (3, 12) else "print 1\n"
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        pytest.skip("libcst cannot parse it either")
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = [n for n in iter_nodes(module) if isinstance(n, cst.Call)]
    assert nodes and positions(module, source, nodes) == {n: reference[n] for n in nodes}


def _lines_run(source: str) -> int:
    """How many lines of trainlint's own code linting `source` executes: its work, counted, not timed."""
    count = 0

    def line(frame, event, arg):
        nonlocal count
        count += event == "line"
        return line

    def call(frame, event, arg):
        return line if "trainlint" in frame.f_code.co_filename else None

    sys.settrace(call)
    try:
        lint_source(source, "train.py", Settings())
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("statement", ["    total += loss\n", "    losses.append(loss)\n", "    t{i} += loss\n"])
def test_the_work_grows_linearly_with_statements_repeated_in_a_loop(statement, in_function):
    """800 `total += loss` in one loop took 40 s: each finding's position search, fix-safety proof
    and reset check walked all the others. Doubling them must at most double the work (timings:
    benchmarks/repeated_statements.py), at the top level and in a function (`t{i}`: a different
    accumulator each time)."""

    def loop(n: int) -> str:
        body = "".join(statement.format(i=i) for i in range(n))
        text = "for x in data:\n    loss = model(x)\n" + body + "    loss.backward()\n    optimizer.step()\n"
        if in_function:
            text = "def train(model, data, optimizer):\n" + "".join(f"    {line}\n" for line in text.splitlines())
        return "import torch\n" + text

    lint_source(loop(2), "train.py", Settings())  # imports and one-off set-up
    single, double = _lines_run(loop(50)), _lines_run(loop(100))
    assert double - 2 * single < 0.05 * single, (single, double)


def test_the_cyclic_collector_is_paused_while_a_file_is_analysed(monkeypatch):
    import trainlint.model.training as training

    seen: list[bool] = []
    build = training.TrainingModel.build.__func__

    def spy(cls, module, *args, **kwargs):
        seen.append(gc.isenabled())
        return build(cls, module, *args, **kwargs)

    monkeypatch.setattr(training.TrainingModel, "build", classmethod(spy))
    assert gc.isenabled()
    lint_source(GOOD, "train.py", Settings())
    assert seen == [False] and gc.isenabled()


def test_selectors_are_validated_without_importing_the_rules():
    from trainlint.rules import RULES_BY_CODE

    assert rule_codes_on_disk() == set(RULES_BY_CODE)
    probe = (
        "import sys\n"
        "from trainlint.config import ConfigError, Settings, validate\n"
        "try:\n    validate(Settings(select=('TL9',)))\nexcept ConfigError as e:\n    print(e)\n"
        "validate(Settings(select=('TL4',), ignore=('TL401',)))\n"
        "print('libcst' in sys.modules, 'trainlint.rules' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert "'TL9' matches no rule code" in out and out.strip().endswith("False False")


def test_standard_input_that_crashes_the_parser_gets_a_tl000(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-line-length = 10000000\nmax-nesting = 100000\n")
    proc = subprocess.run(
        [sys.executable, "-m", "trainlint", "-", "--stdin-filename", "train.py", "--format", "json", "--no-cache"],
        input=STEP + DEEP["nested_dicts.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [diagnostic] = json.loads(proc.stdout)
    # (libcst's native parser recurses on the worker's main stack: it crashes, or reaches a limit first)
    assert diagnostic["code"] == "TL000" and any(why in diagnostic["message"] for why in PARSER_LIMITS), diagnostic["message"]


def test_the_step_prefilter_skips_per_step_rules_only_where_no_step_can_be(tmp_path):
    from trainlint.engine.lint import rules_for

    settings = Settings()
    per_step = {"TL302", "TL406"}  # whose own tokens every variant below has
    evaluation = "import torch\nfor x in loader:\n    out = model(x.cuda())\n    total += out\n    print(out.item())\n"
    assert not per_step & {r.code for r in rules_for(evaluation, str(tmp_path / "eval.py"), settings)}
    # a step of its own, a hook, a loss-scaler call, or a loop calling into a project module
    for stepping in (
        evaluation + "    loss.backward()\n",
        evaluation + "    opt . step ()\n",
        evaluation.replace("for x", "def training_step(self, x):\n    pass\nfor x"),
        evaluation + "    loss_scaler(loss, opt)\n",
    ):
        assert per_step <= {r.code for r in rules_for(stepping, str(tmp_path / "train.py"), settings)}, stepping
    (tmp_path / "engine.py").write_text("def run(model, opt, x):\n    model(x).sum().backward()\n    opt.step()\n")
    calling = "from engine import run\n" + evaluation
    assert per_step <= {r.code for r in rules_for(calling, str(tmp_path / "main.py"), settings)}
    relative = "from .engine import run\n" + evaluation
    assert per_step <= {r.code for r in rules_for(relative, str(tmp_path / "nowhere" / "main.py"), settings)}
    library = "from torch.utils.data import DataLoader\n" + evaluation
    assert not per_step & {r.code for r in rules_for(library, str(tmp_path / "main.py"), settings)}


def test_rules_refine_the_prefilter_only_where_they_cannot_fire(tmp_path):
    from trainlint.engine.lint import rules_for

    settings = Settings()

    def selected(source: str, name: str = "train.py") -> set[str]:
        return {r.code for r in rules_for(source, str(tmp_path / name), settings)}

    optimizer_only = "import torch\nopt = torch.optim.AdamW(model.parameters())\nfor x in data:\n    evaluate(model(x))\n"
    assert not {"TL101", "TL104", "TL502"} & selected(optimizer_only)  # no dtype, one `.step` at most
    assert "TL101" in selected(optimizer_only.replace("model.parameters()", "model.bfloat16().parameters()"))
    # the cast may come from a builder of the project: a file that imports one is analysed
    (tmp_path / "models").mkdir()
    assert "TL101" in selected("from models import build\n" + optimizer_only)
    assert "TL502" in selected("sched.step()\nopt.step()\n")
    assert "TL502" not in selected("train_step(batch)\nopt.step()\n")
    assert "TL303" not in selected("model.eval()\nout = model(x)\n")  # no loop, no function
    assert "TL303" in selected("def predict(net, x):\n    net.train(False)\n    return net(x)\n")
    assert "TL303" in selected("model.eval()\n\fwhile True:\n    out = model(x)\n")
    assert "TL303" not in selected("def score(evaluator, xs):\n    for x in xs:\n        evaluator(x)\n")
    assert "TL303" not in selected("def evaluate_model(xs):\n    for x in xs:\n        model(x)\n")  # (a name selects nothing)
    # a helper looping over batches in a module that trains: its callers may let its graphs die unused
    assert "TL303" in selected("def evaluate_model(net, xs):\n    for x in xs:\n        net(x)\n\nloss.backward()\n")
    # fp16 without clipping: a Lightning trainer's precision, or fp16 where something backpropagates
    assert "TL202" not in selected("scaler = torch.cuda.amp.GradScaler()\nfor x in data:\n    print(x)\n")
    assert "TL202" in selected("trainer = L.Trainer(precision='16-mixed')\n")
    assert "TL202" in selected("scaler = torch.cuda.amp.GradScaler()\nscaler.scale(loss).backward()\n")
