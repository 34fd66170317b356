"""`# noqa` through the real command: TL001 unused-noqa and `--add-noqa`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from trainlint.cli import main

STEP = """\
import torch
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def found(path: Path, *args: str) -> list[tuple[int, str]]:
    _, out, _ = run(str(path), "--output-format", "json", *args)
    return [(d["line"], d["code"]) for d in json.loads(out)]


def test_unused_noqa_is_reported_for_codes_of_rules_that_ran(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(
        STEP
        + "    total += loss.item()  # noqa: TL401\n"  # used
        + "    seen = 1  # noqa: TL401, E501\n"  # TL401 unused; E501 is another tool's
        + "    other = 2  # noqa: E501, F401\n"  # never reported
        + "    order = 3  # noqa: TL501\n"  # unused when TL501 runs
        + "    pinned = 4  # noqa: TL405\n"  # TL405 is off by default, so it does not run: never reported
        + "    bare = 5  # noqa\n"
    )
    assert found(path) == []  # off by default, like ruff's RUF100
    assert found(path, "--extend-select", "TL001") == [(9, "TL001"), (11, "TL001")]
    assert found(path, "--extend-select", "TL001", "--ignore", "TL501") == [(9, "TL001")]
    assert found(path, "--select", "TL4,TL001") == [(9, "TL001")]
    assert found(path, "--extend-select", "TL001", "--per-file-ignores", "train.py:TL001") == []
    code, out, _ = run(str(path), "--select", "TL4,TL001", "--output-format", "concise")
    assert "train.py:9:15: TL001 [*] unused `noqa` directive: TL401 suppressed nothing here" in out


def test_unused_noqa_fix_removes_only_the_unused_codes(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(STEP + "    seen = 1  # noqa: TL401, E501\n    alone = 2  # noqa: TL401\n    why = 3  # noqa: TL401 slow path\n")
    code, _, _ = run(str(path), "--select", "TL4,TL001", "--fix")
    assert path.read_text() == STEP + "    seen = 1  # noqa: E501\n    alone = 2\n    why = 3  # slow path\n"
    assert code == 0


def test_add_noqa_is_idempotent_merges_and_keeps_line_endings(tmp_path: Path):
    path = tmp_path / "train.py"
    source = (
        STEP
        + "    total += loss.item()  # noqa: E501\n"
        + "    torch.cuda.reset_peak_memory_stats()  # reset the peak\n"
        + "    history.append(loss.item())\n"
    ).replace("\n", "\r\n")
    path.write_bytes(source.encode())
    code, _, err = run(str(path), "--add-noqa")
    assert code == 0 and "Added 3 noqa directives." in err
    expected = (
        STEP
        + "    total += loss.item()  # noqa: E501, TL401\n"
        + "    torch.cuda.reset_peak_memory_stats()  # reset the peak  # noqa: TL403\n"
        + "    history.append(loss.item())  # noqa: TL401\n"
    ).replace("\n", "\r\n")
    assert path.read_bytes() == expected.encode()
    assert run(str(path))[0] == 0  # every finding is silenced
    code, _, err = run(str(path), "--add-noqa")
    assert "Added 0 noqa directives." in err and path.read_bytes() == expected.encode()
    assert found(path, "--extend-select", "TL001") == []  # and none of them is unused
