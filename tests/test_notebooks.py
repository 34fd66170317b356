"""Jupyter notebooks through the real command: discovery, cells joined, positions, fixes written back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainlint.cli import main

MODEL_CELL = [
    "%matplotlib inline\n",
    "!pip install -q torch\n",
    "import torch\n",
    "history = []  # ünïcode\n",
    "\n",
    "def train_step(x, y):\n",
    "    x, y = x.cuda(), y.cuda()\n",
    "    loss = criterion(model(x), y)\n",
    "    loss.backward()\n",
    "    optimizer.step()\n",
    "    optimizer.zero_grad()\n",
    "    history.append(loss)\n",
    "    return loss",
]
LOOP_CELL = ["for x, y in loader:\n", "    %time train_step(x, y)\n", "    files = !ls\n", "    train_step(x, y)\n"]


def notebook(*cells: dict[str, object], language: str = "python") -> str:
    """Notebook JSON as Jupyter writes it (one-space indent, non-ASCII kept), cell keys in Jupyter's order."""
    data = {
        "cells": list(cells),
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": language, "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def code_cell(source: list[str] | str, outputs: list[object] | None = None) -> dict[str, object]:
    return {"cell_type": "code", "execution_count": 1, "id": "c0ffee", "metadata": {"scrolled": True},
            "outputs": outputs or [], "source": source}


def markdown(text: str) -> dict[str, object]:
    return {"cell_type": "markdown", "id": "d0c", "metadata": {}, "source": [text]}


TRAINING = notebook(
    markdown("# Training 🚀\n"),
    code_cell(MODEL_CELL, [{"name": "stdout", "output_type": "stream", "text": ["Successfully installed\n"]}]),
    code_cell(["%%bash\n", "nvidia-smi | head -1 && echo 'not python: for x in'"]),
    code_cell(LOOP_CELL),
)


def run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=input)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def write(tmp_path: Path, text: str = TRAINING, name: str = "train.ipynb") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def findings(*args: str) -> list[dict[str, object]]:
    return json.loads(run(*args, "--output-format", "json")[1])


def test_a_loop_in_one_cell_calls_a_step_function_of_an_earlier_cell(tmp_path: Path):
    path = write(tmp_path)
    (d,) = findings(str(path))
    # cell 2 (counting the markdown cell), line 12 of that cell: inside train_step, called per step in cell 4
    assert (d["code"], d["cell"], d["line"], d["column"], d["end_line"], d["end_column"]) == ("TL302", 2, 12, 5, 12, 25)
    assert d["fix"]["edits"] == [{"line": 12, "column": 20, "end_line": 12, "end_column": 24, "content": "loss.detach()", "cell": 2}]
    code, out = run(str(path))
    assert code == 1 and f"{path}:cell 2:12:5: TL302" in out
    assert "12 |     history.append(loss)" in out


def test_notebooks_are_discovered_and_magics_keep_line_numbers(tmp_path: Path):
    (tmp_path / "nb").mkdir()
    write(tmp_path, name="nb/train.ipynb")
    write(tmp_path, notebook(code_cell("import torch\n")), name="nb/clean.ipynb")
    assert {(Path(str(d["path"])).name, d["code"]) for d in findings(str(tmp_path))} == {("train.ipynb", "TL302")}
    # magics are blanked, not deleted: a line after them keeps its number in its cell
    (d,) = findings(str(tmp_path / "nb" / "train.ipynb"), "--select", "TL302")
    assert d["line"] == MODEL_CELL.index("    history.append(loss)\n") + 1


def test_positions_in_json_github_sarif_and_lsp(tmp_path: Path):
    path = write(tmp_path)
    text_lines = TRAINING.splitlines()
    json_line = next(i for i, line in enumerate(text_lines, 1) if "history.append(loss)" in line)
    json_column = text_lines[json_line - 1].index("history") + 1
    _, out = run(str(path), "--output-format", "github")
    assert f"line={json_line},col={json_column},endLine={json_line},endColumn={json_column + 20}" in out
    assert "::cell 2, line 12: `history.append(...)`" in out
    _, out = run(str(path), "--output-format", "sarif")
    (result,) = json.loads(out)["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"], region["endColumn"]) == (json_line, json_column, json_column + 20)
    assert result["properties"] == {"cell": 2, "cellLine": 12, "cellColumn": 5}
    _, out = run(str(path), "--output-format", "lsp")
    (diagnostic,) = json.loads(out)[path.resolve().as_uri()]
    assert diagnostic["range"] == {"start": {"line": 11, "character": 4}, "end": {"line": 11, "character": 24}}
    assert diagnostic["data"]["cell"] == 2


def test_fix_rewrites_only_the_edited_source_line(tmp_path: Path):
    path = write(tmp_path)
    before = path.read_bytes()
    code, _ = run(str(path), "--fix")
    after = path.read_bytes()
    assert code == 0
    expected = before.replace(b'"    history.append(loss)\\n",', b'"    history.append(loss.detach())\\n",')
    assert after == expected and after != before
    # a cell whose source is one string, a file without a final newline, another indentation
    single = json.dumps(json.loads(notebook(code_cell("".join(MODEL_CELL)), code_cell(LOOP_CELL))), indent=2)
    path.write_text(single, encoding="utf-8")
    run(str(path), "--fix")
    assert path.read_text(encoding="utf-8") == single.replace("history.append(loss)\\n", "history.append(loss.detach())\\n")


def test_diff_and_stdin(tmp_path: Path):
    path = write(tmp_path)
    code, out = run(str(path), "--diff")
    assert '-    "    history.append(loss)\\n",' in out and '+    "    history.append(loss.detach())\\n",' in out
    assert path.read_text(encoding="utf-8") == TRAINING
    code, out = run("-", "--stdin-filename", "train.ipynb", "--fix", input=TRAINING)
    assert out == TRAINING.replace("history.append(loss)\\n", "history.append(loss.detach())\\n")


def test_add_noqa_in_a_notebook(tmp_path: Path):
    path = write(tmp_path)
    run(str(path), "--add-noqa")
    assert '"    history.append(loss)  # noqa: TL302\\n",' in path.read_text(encoding="utf-8")
    assert run(str(path))[0] == 0


def test_invalid_json_and_other_languages(tmp_path: Path):
    broken = write(tmp_path, TRAINING[:200], name="broken.ipynb")
    (d,) = findings(str(broken))
    assert d["code"] == "TL000" and "not valid JSON" in str(d["message"]) and "cell" not in d
    assert (d["line"], d["column"]) > (1, 1)
    r_notebook = write(tmp_path, notebook(code_cell(["for x in loader:\n", "    loss.backward()\n"]), language="R"), name="r.ipynb")
    assert findings(str(r_notebook)) == []


@pytest.mark.parametrize("indent", [1, 2, 4, "\t", None])
@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("as_string", [True, False])
def test_positions_and_fixes_whatever_the_json_style(tmp_path: Path, indent: object, ensure_ascii: bool, as_string: bool):
    data = json.loads(TRAINING)
    if as_string:
        for cell in data["cells"]:
            cell["source"] = "".join(cell["source"])
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii)  # type: ignore[arg-type]
    path = write(tmp_path, text)
    _, out = run(str(path), "--output-format", "github")
    line, column = (int(v) for v in re.search(r"line=(\d+),col=(\d+)", out).groups())  # type: ignore[union-attr]
    assert text.splitlines()[line - 1][column - 1 :].startswith("history.append(loss)")
    run(str(path), "--fix")
    after = path.read_text(encoding="utf-8")
    assert after == text.replace("history.append(loss)", "history.append(loss.detach())")


def test_a_notebook_over_max_file_size_only_by_its_outputs_is_linted(tmp_path: Path):
    """A plot of 6 MB in an output made the notebook larger than max-file-size (5 MB): it was refused
    though only its code cells, a few hundred bytes, are linted."""
    plot = {"data": {"image/png": "iVBORw0KGgo" * 600_000}, "metadata": {}, "output_type": "display_data"}
    path = write(tmp_path, notebook(code_cell(MODEL_CELL, [plot]), code_cell(LOOP_CELL)))
    assert path.stat().st_size > 6_000_000
    found = findings(str(path))
    assert found and not [d for d in found if d["code"] == "TL000"], found
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 300\n")  # the code is larger
    [diagnostic] = findings(str(write(tmp_path, notebook(code_cell(MODEL_CELL), code_cell(LOOP_CELL)), "small.ipynb")))
    assert diagnostic["code"] == "TL000"
    assert re.fullmatch(r"notebook too large to lint \(\d+ bytes of code cells > max-file-size 300\)", diagnostic["message"])


def test_a_cell_with_a_lone_surrogate_is_a_tl000_in_every_format(tmp_path: Path):
    """JSON can escape a lone surrogate (`"\\ud800"`), which no UTF-8 text can hold: the parser raised
    and the code frame could not be printed."""
    text = notebook(code_cell(MODEL_CELL), code_cell([*LOOP_CELL, "    label = '\ud800'\n"]))
    path = write(tmp_path, text.replace("\ud800", "\\ud800"))
    [diagnostic] = findings(str(path))
    assert (diagnostic["code"], diagnostic["cell"], diagnostic["line"], diagnostic["column"]) == ("TL000", 2, 5, 14)
    assert diagnostic["message"] == "syntax error: a lone surrogate (U+D800) cannot be encoded as UTF-8"
    for output_format in ("text", "concise", "github", "sarif"):
        code, out = run(str(path), "--output-format", output_format)
        assert code == 1 and "U+D800" in out, out


def test_an_indented_shell_escape_opening_a_cell_is_ipython_syntax_not_a_parse_error(tmp_path: Path):
    # IPython drops a cell's leading indent: ` !tts --text "hi" \` with continuation lines runs the shell
    escape = ' !tts --text "hi" \\\n      --out_path out.wav\n'
    nested = "for i in range(2):\n    !echo $i\n"
    path = write(tmp_path, notebook(code_cell(escape), code_cell(MODEL_CELL), code_cell(nested), code_cell(LOOP_CELL)))
    assert [(d["code"], d["cell"]) for d in findings(str(path))] == [("TL302", 2)]


def test_a_line_starting_with_percent_inside_brackets_continues_the_expression(tmp_path: Path):
    # a textbook's training loop: the `%` formatting of a print continues on the next line
    loop = [
        "def train(net, train_iter, loss, optimizer, device, start):\n",
        "    for X, y in train_iter:\n",
        "        l = loss(net(X.to(device)), y.to(device))\n",
        "        optimizer.zero_grad()\n",
        "        l.backward()\n",
        "        optimizer.step()\n",
        "        print('loss %.4f, time %.1f sec'\n",
        "              % (l.cpu().item(), time.time() - start))\n",
        "    %time train(net, train_iter, loss, optimizer, device, 0)\n",
    ]
    path = write(tmp_path, notebook(code_cell(["import time\n", "import torch\n"]), code_cell(loop)))
    assert [(d["code"], d["cell"], d["line"]) for d in findings(str(path))] == [("TL401", 2, 8)]
