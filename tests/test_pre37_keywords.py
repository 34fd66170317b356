"""Code of Python before 3.7 with `async` as a keyword argument (`x.cuda(async=True)`, PyTorch's
spelling of `non_blocking=True` before 0.4): reported as TL000 and analysed all the same, in the file
and as another file's helper or caller."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from trainlint.config import Settings
from trainlint.engine.lint import lint_paths, lint_source
from trainlint.reading import pre37_keywords

ROOT = Path(__file__).resolve().parent.parent

TRAIN = textwrap.dedent("""\
    import torch

    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x = x.cuda(async=True)
        y = y.cuda(async = True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(loss.item())
""")


def test_async_keyword_arguments_are_read_as_names_of_the_same_length():
    assert pre37_keywords("x.cuda(async=True)") == "x.cuda(_sync=True)"
    assert pre37_keywords("f(a, async = b)") == "f(a, _sync = b)"
    assert pre37_keywords("f(a,\n  async=b)") == "f(a,\n  _sync=b)"
    for valid in ("async def f():\n    pass\n", "(async for x in y)", "f(async_=1)", "f(x == async_)", "f(asyncio=1)"):
        assert pre37_keywords(valid) == valid
    assert pre37_keywords("f(async == 1)") == "f(async == 1)"  # (a comparison, not a keyword argument)


def test_the_file_is_reported_and_analysed():
    result = lint_source(TRAIN, "train.py", Settings())
    by_code = {d.code: d for d in result.diagnostics}
    assert sorted(by_code) == ["TL000", "TL401"]
    parse_error = by_code["TL000"]
    assert (parse_error.line, parse_error.column) == (6, 16) and "the rest of the file was analysed" in parse_error.message
    assert by_code["TL401"].line == 12 and by_code["TL401"].column == 11


def test_findings_in_a_file_read_so_carry_no_fix(tmp_path):
    """A fix is made on the text as read (`_sync=`): applied to the file it would write that name."""
    code = TRAIN.replace("    print(loss.item())\n", "    total_loss += loss\n")
    result = lint_source(code, "train.py", Settings())
    kept = [d for d in result.diagnostics if d.code == "TL302"]
    assert kept and all(d.fix is None for d in kept)
    assert lint_source(code.replace("async=True", "non_blocking=True").replace("async = True", "non_blocking=True"),
                       "train.py", Settings()).diagnostics[0].fix is not None  # (the same finding has a fix in valid code)
    path = tmp_path / "train.py"
    path.write_text(code)
    subprocess.run([sys.executable, "-m", "trainlint", str(path), "--fix", "--unsafe-fixes", "--no-cache"], capture_output=True, cwd=ROOT)
    assert path.read_text() == code


def test_another_syntax_error_leaves_the_file_unanalysed():
    broken = TRAIN.replace("    loss.backward()\n", "    loss.backward(\n")
    assert [d.code for d in lint_source(broken, "train.py", Settings()).diagnostics] == ["TL000"]
    assert "the rest of the file" not in lint_source(broken, "train.py", Settings()).diagnostics[0].message


def test_a_script_of_that_python_calls_a_helper_every_step(tmp_path):
    """The script does not parse on Python 3.7+, its helper does: the helper is still run every step."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "timing.py").write_text("import torch\n\ndef tick():\n    torch.cuda.synchronize()\n")
    (tmp_path / "train.py").write_text(TRAIN.replace("import torch\n", "import torch\nfrom timing import tick\n")
                                       .replace("    print(loss.item())\n", "    tick()\n"))
    results = lint_paths([(tmp_path / "timing.py", Settings(root=tmp_path)), (tmp_path / "train.py", Settings(root=tmp_path))], jobs=1)
    found = sorted(f"{Path(d.path).name}:{d.line}:{d.code}" for r in results for d in r.diagnostics)
    assert found == ["timing.py:4:TL402", "train.py:7:TL000"]
    [sync] = [d for r in results for d in r.diagnostics if d.code == "TL402"]
    assert [(Path(place.path).name, place.line) for chain in sync.chains for place in chain][:1] == [("train.py", 13)]


def test_a_python_2_numpy_helper_of_the_step_is_left_to_a_python_linter(tmp_path):
    """Faster R-CNN's proposal layer: Python 2 NumPy code the model's `forward` calls every step. It names
    neither torch nor a step (only a token a rule looks for, `argmax`), so it cannot hold a finding of its
    own; the TL000 page leaves it unreported.
    The same file naming torch is reported."""
    (tmp_path / "pyproject.toml").write_text("")
    layer = "import numpy as np\n\nclass Proposals:\n    def __call__(self, scores):\n        print 'scores', scores.shape\n        self.order = np.argmax(scores)\n        return self.order\n\nproposals = Proposals()\n"
    (tmp_path / "proposals.py").write_text(layer)
    (tmp_path / "train.py").write_text(TRAIN.replace("import torch\n", "import torch\nfrom proposals import proposals\n")
                                       .replace("    print(loss.item())\n", "    proposals(x.cpu().numpy())\n")
                                       .replace("async=True", "non_blocking=True").replace("async = True", "non_blocking=True"))
    tasks = [(tmp_path / name, Settings(root=tmp_path)) for name in ("proposals.py", "train.py")]
    assert not [d for r in lint_paths(tasks, jobs=1) for d in r.diagnostics if d.code == "TL000"]
    (tmp_path / "proposals.py").write_text(layer.replace("import numpy as np\n", "import numpy as np\nimport torch\n"))
    assert [Path(d.path).name for r in lint_paths(tasks, jobs=1) for d in r.diagnostics if d.code == "TL000"] == ["proposals.py"]
