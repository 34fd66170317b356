"""`--format sarif|github|lsp`: validated against the official SARIF schema, and pinned."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from trainlint.cli import main
from trainlint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
FIXABLE = """\
import torch
history = []
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    history.append(loss)  # ünïcode before: columns in code points
"""


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_sarif_validates_against_the_official_schema(tmp_path: Path):
    code, out = run(str(ROOT / "examples"), "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    jsonschema.validate(log, SCHEMA)
    run_ = log["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules][:3] == ["TL000", "TL001", "TL101"] and len(rules) == 2 + len(ALL_RULES)  # TL000, TL001 and every rule
    tl101 = rules[2]
    assert tl101["name"] == "low-precision-params-trained"
    assert tl101["helpUri"].endswith("rules/TL101-low-precision-params-trained.md")
    assert tl101["defaultConfiguration"]["level"] == "error" and tl101["help"]["markdown"].startswith("# TL101")
    results = run_["results"]
    assert sorted(r["ruleId"] for r in results) == ["TL101", "TL202", "TL301", "TL302", "TL401", "TL403"]
    first = next(r for r in results if r["ruleId"] == "TL101")
    region = first["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (54, 13)
    assert rules[first["ruleIndex"]]["id"] == "TL101"
    assert {r["level"] for r in results} == {"error", "warning", "note"}


def test_sarif_carries_fixes_and_the_validator_rejects_a_broken_log(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(FIXABLE, encoding="utf-8")
    _, out = run(str(path), "--format", "sarif")
    log = json.loads(out)
    jsonschema.validate(log, SCHEMA)
    (result,) = log["runs"][0]["results"]
    (replacement,) = result["fixes"][0]["artifactChanges"][0]["replacements"]
    assert replacement["insertedContent"]["text"] == "loss.detach()"
    assert replacement["deletedRegion"] == {"startLine": 9, "startColumn": 20, "endLine": 9, "endColumn": 24}
    result["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(log, SCHEMA)


def test_github_annotations_are_pinned(tmp_path: Path):
    code, out = run(str(ROOT / "examples" / "energy_trainer.py"), "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        "::notice file=" + str(ROOT / "examples" / "energy_trainer.py") + ",line=22,col=13,endLine=22,endColumn=49,"
        "title=TL403 memory-stats-in-step::`torch.cuda.reset_peak_memory_stats()` runs on every training step "
        "(every step via " + str(ROOT / "examples" / "energy_trainer.py") + ":36). "
        "Fix: Reset or read memory statistics at epoch boundaries or under a debug/log flag."
    )
    assert [line.split(" ", 1)[0] for line in lines] == ["::notice", "::warning", "::error", "::warning"]
    # `%` is escaped in messages; `,` and `:` in properties
    assert "if step %25 log_every == 0:" in lines[-1]


def test_github_escapes_properties(tmp_path: Path):
    from trainlint.diagnostics import Diagnostic, Severity
    from trainlint.report.github import annotation

    d = Diagnostic("TL401", "host-sync-in-step", "100% bad\nreally", Severity.INFO, "a,b:c.py", 1, 2, 1, 3)
    assert annotation(d) == "::notice file=a%2Cb%3Ac.py,line=1,col=2,endLine=1,endColumn=3,title=TL401 host-sync-in-step::100%25 bad%0Areally"


def test_lsp_format_is_zero_based_utf16_and_lists_clean_files(tmp_path: Path):
    bad = tmp_path / "train.py"
    bad.write_text(FIXABLE.replace("history.append(loss)  #", "history.append(loss); s = '😀'; history.append(loss)  #"), encoding="utf-8")
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nloss.backward()\n", encoding="utf-8")
    code, out = run(str(tmp_path), "--format", "lsp")
    assert code == 1
    by_uri = json.loads(out)
    assert by_uri[clean.resolve().as_uri()] == []
    found = by_uri[bad.resolve().as_uri()]
    assert [d["code"] for d in found] == ["TL302", "TL302"]
    first, second = found
    assert first["range"] == {"start": {"line": 8, "character": 4}, "end": {"line": 8, "character": 24}}
    # the emoji before the second finding is one code point but two UTF-16 units
    line = FIXABLE.splitlines()[8].replace("history.append(loss)  #", "history.append(loss); s = '😀'; history.append(loss)  #")
    assert second["range"]["start"]["character"] == line.index("history", 5) + 1
    assert first["severity"] == 1 and first["source"] == "trainlint"
    assert first["codeDescription"]["href"].endswith("TL302-autograd-history-accumulated.md")
    assert first["data"]["fix"]["edits"][0]["content"] == "loss.detach()"


def test_plain_text_is_what_rich_prints_without_styles():
    """Where no style shows, text output skips rich: it must be the same text, markup-like brackets,
    emoji codes, backslashes and control characters in paths, messages and source lines included."""
    import io

    from trainlint.diagnostics import Diagnostic, Severity
    from trainlint.report.text import PlainConsole, StyledConsole, render_concise, render_full
    from trainlint.report.render import make_console

    odd = "x = '[bold]not markup[/]' + '\\\\[dim]' + ':100:'\f\r"
    diagnostics = [
        Diagnostic("TL401", "host-sync-in-step", "reads `t[0]` [red] :smile: \\", Severity.WARNING, "a [b]/c.py", 1, 5, 1, 9, hint="use [x]\x1b]0;t\x07\tnow"),
        Diagnostic("TL101", "low-precision-params-trained", "cast", Severity.ERROR, "a [b]/c.py", 2, 1, 3, 1),
    ]
    sources = {("a [b]/c.py", None): [odd, "y = 1\t# tab"]}
    outputs = []
    for render in (
        lambda out: render_full(out, diagnostics, sources, lambda d: d.code == "TL401"),
        lambda out: render_concise(out, diagnostics, lambda d: False),
    ):
        plain, styled = io.StringIO(), io.StringIO()
        render(PlainConsole(plain))
        render(StyledConsole(make_console("never", styled)))
        assert plain.getvalue() == styled.getvalue()
        outputs.append(plain.getvalue())
    assert "1 | " + odd.replace("\f\r", "\\x0c\\x0d") + "\n" in outputs[0]  # shown, not acted on
    assert "a [b]/c.py:1:5: TL401 [*] [host-sync-in-step] reads `t[0]` [red] :smile: \\" in outputs[0]
    assert outputs[1].splitlines()[1] == "a [b]/c.py:2:1: TL101 cast"
    assert "  = fix: use [x]\\x1b]0;t\\x07    now\n" in outputs[0]  # the tab expanded as rich does


# Sequences a terminal acts on: retitle, clear the screen, a C1 CSI, BEL, backspace, DEL, a
# right-to-left override and isolate (which reorder what follows), NEL and the line separator.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x08\x7f\u202e\u2067\x85\u2028"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\x08\\x7f\\u202e\\u2067\\x85\\u2028"
SGR = re.compile("\x1b\\[[0-9;]*m")  # the colours of `--color always`, trainlint's own
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _hostile_file(tmp_path: Path) -> Path:
    """A file whose name and source lines hold control sequences, with a finding after them on a line
    and a form feed (a line break for `str.splitlines`, not for Python) above it."""
    path = tmp_path / f"train{HOSTILE}.py"
    source = FIXABLE.replace("import torch\n", "import torch\n\f\n").replace(
        "    history.append(loss)", f"    s = '{HOSTILE}'; history.append(loss)"
    ).replace("# ünïcode", f"# ünïcode {HOSTILE}")
    path.write_text(source, encoding="utf-8")
    return path


@pytest.mark.parametrize("color", ["never", "always"])
def test_text_shows_control_characters_as_escapes(tmp_path: Path, color: str):
    """A file cannot retitle or clear the terminal, or hide a line, through trainlint's output: its
    name and lines are printed with each control character escaped, the caret under the finding."""
    path = _hostile_file(tmp_path)
    shown_path = str(path).replace(HOSTILE, SHOWN)
    for fmt in ("text", "concise"):
        code, out = run(str(path), "--no-cache", "--format", fmt, "--color", color)
        assert code == 1
        plain = SGR.sub("", out)
        assert not CONTROL.search(plain) and "\t" not in plain, repr(plain)
        assert f"{shown_path}:10:" in plain
    frame = SGR.sub("", run(str(path), "--no-cache", "--color", color)[1]).splitlines()
    (source,) = [line for line in frame if line.startswith("10 |")]
    assert source == f"10 |     s = '{SHOWN}'; history.append(loss)  # ünïcode {SHOWN} before: columns in code points"
    caret = frame[frame.index(source) + 1]
    assert caret.index("^") == source.index("history.append") and caret.count("^") == len("history.append(loss)")


def test_github_annotations_show_control_characters_as_escapes(tmp_path: Path):
    path = _hostile_file(tmp_path)
    code, out = run(str(path), "--no-cache", "--format", "github")
    assert code == 1
    (line,) = out.splitlines()  # a control character cannot start a second workflow command either
    assert not CONTROL.search(line)
    assert line.startswith("::error file=" + str(path).replace(HOSTILE, SHOWN).replace(":", "%3A") + ",line=10,")


def test_junit_is_well_formed_xml_with_control_characters_as_escapes(tmp_path: Path):
    """XML 1.0 cannot hold most C0 controls at all (not even as `&#7;`): a file name or a line that
    holds them is written with each control character escaped, as the text and GitHub formats do, so
    that the report parses and still says which file."""
    from xml.etree import ElementTree as ET

    path = _hostile_file(tmp_path)
    odd = path.with_name("odd\x01\x0b\r\ufffe.py")  # C0s XML forbids, a CR it would turn into a LF, a non-character
    odd.write_text(FIXABLE, encoding="utf-8")
    code, out = run(str(path), str(odd), "--no-cache", "--format", "junit")
    assert code == 1
    root = ET.fromstring(out.encode("utf-8"))
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {str(path).replace(HOSTILE, SHOWN), str(odd).replace("odd\x01\x0b\r\ufffe", "odd\\x01\\x0b\\x0d\\ufffe")}
    for name, suite in suites.items():
        (case,) = suite.iter("testcase")
        line = "9" if "odd" in name else "10"  # (the hostile file has a form feed's line above)
        assert case.get("classname") == name and case.get("line") == line
        failure = case.find("failure")
        assert failure.get("type") == "TL302" and failure.text.startswith(f"{name}:{line}:")
    assert not CONTROL.search(out.replace("\n", ""))


def test_stderr_lines_show_control_characters_as_escapes(tmp_path: Path):
    """`--fix`'s lines name the file, `--show-files` lists it."""
    path = _hostile_file(tmp_path)
    result = CliRunner().invoke(main, [str(path), "--no-cache", "--fix", "--show-fixes"])
    assert result.exit_code == 0 and "Fixed 1 problem in " in result.stderr
    assert not CONTROL.search(result.stdout + result.stderr) and str(path).replace(HOSTILE, SHOWN) in result.stdout
    code, out = run(str(tmp_path), "--show-files")
    assert code == 0 and out == str(path).replace(HOSTILE, SHOWN) + "\n"
