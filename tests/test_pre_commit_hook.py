"""The pre-commit hooks, run by the real `pre-commit try-repo` against this repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BAD = textwrap.dedent("""\
    import torch
    model = Net().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""")
CLEAN = textwrap.dedent("""\
    import torch
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""")
FIXABLE = textwrap.dedent("""\
    import torch
    history = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append(loss)
""")
NETWORK_ERRORS = ("Failed to establish a new connection", "Temporary failure in name resolution", "No matching distribution")

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One hook environment for the module: installing trainlint into it is the slow part."""
    return tmp_path_factory.mktemp("pre-commit-home")


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
    return path


def try_repo(repo: Path, hook: str, home: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--files", *files, "--color", "never"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )
    if result.returncode != 0 and any(e in result.stdout + result.stderr for e in NETWORK_ERRORS):
        pytest.skip("pre-commit could not install the hook: no access to the package index")
    return result


def test_hook_fails_on_a_finding_and_passes_clean_files(tmp_path: Path, pre_commit_home: Path):
    ds_config = '{"fp16": {"enabled": true}, "train_batch_size": 8}\n'
    repo = git_repo(tmp_path / "repo", {"bad.py": BAD, "clean.py": CLEAN, "ds_config.json": ds_config, "package.json": "{}\n"})
    bad = try_repo(repo, "trainlint", pre_commit_home, "bad.py", "clean.py", "ds_config.json", "package.json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "bad.py:2:9: TL101" in bad.stdout and "ds_config.json:1:2: TL204" in bad.stdout
    assert "clean.py:" not in bad.stdout and "package.json" not in bad.stdout
    good = try_repo(repo, "trainlint", pre_commit_home, "clean.py", "package.json")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout


def test_force_exclude_honours_the_users_exclude(tmp_path: Path, pre_commit_home: Path):
    pyproject = '[tool.trainlint]\nexclude = ["legacy/"]\n'
    repo = git_repo(tmp_path / "repo", {"pyproject.toml": pyproject, "legacy/old.py": BAD})
    result = try_repo(repo, "trainlint", pre_commit_home, "legacy/old.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_fix_hook_applies_safe_fixes(tmp_path: Path, pre_commit_home: Path):
    repo = git_repo(tmp_path / "repo", {"train.py": FIXABLE})
    result = try_repo(repo, "trainlint-fix", pre_commit_home, "train.py")
    # pre-commit fails a hook that modified files, and the file now holds the fix
    assert result.returncode == 1, result.stdout + result.stderr
    assert "history.append(loss.detach())" in (repo / "train.py").read_text()
    again = try_repo(repo, "trainlint-fix", pre_commit_home, "train.py")
    assert again.returncode == 0, again.stdout + again.stderr


def test_one_summary_per_hook_run_however_many_files(tmp_path: Path, pre_commit_home: Path):
    # pre-commit splits the files of a hook that may run in parallel into batches of at least 4, one
    # per CPU, each a run of its own with its own summary; `require_serial: true` makes it one run
    files = {f"bad{i}.py": BAD for i in range(6)} | {f"clean{i}.py": CLEAN for i in range(6)}
    repo = git_repo(tmp_path / "repo", files)
    result = try_repo(repo, "trainlint", pre_commit_home, *files)
    assert result.returncode == 1, result.stdout + result.stderr
    summaries = [line for line in result.stdout.splitlines() if line.startswith(("Found ", "All checks passed!"))]
    assert summaries == ["Found 6 problems (6 errors) in 6 files"], result.stdout
