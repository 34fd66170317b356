"""The result cache: same output with and without it and with any -j, a warm run that loads neither
libcst nor the rules, safe under concurrent runs, never stale, bounded."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trainlint.engine import cache as cache_module
from trainlint.engine.cache import Cache, grouped
from trainlint.config import Settings
from trainlint.engine.results import FileResult
from trainlint.engine.lint import lint_paths

ROOT = Path(__file__).resolve().parent.parent
STEP = """\
import torch
model = Net().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    opt.step()
    print(loss.item())
"""


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(ROOT / "examples", folder)
    (folder / "step.py").write_text(STEP)
    (folder / "broken.py").write_text("def train(:\n    loss.backward()\n")
    (folder / "deep.py").write_text(STEP + "x = " + "(" * 300 + "1" + ")" * 300 + "\n")
    (folder / "notes.py").write_text("print('nothing to see')\n")
    return folder


def trainlint(*args: str, cache: Path | None = None, python: tuple[str, ...] = (), timeout: float = 300,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if cache is not None:
        env["TRAINLINT_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, *python, "-m", "trainlint", *args], capture_output=True, text=True, env=env, timeout=timeout)


def entries(cache: Path) -> list[Path]:
    """The cached results (not the groups of dependencies they name)."""
    return [p for p in cache.rglob("*") if p.is_file() and not p.name.startswith(".tmp") and b'"path"' in p.read_bytes()]


def test_output_is_identical_with_and_without_the_cache_and_with_any_jobs(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    for fmt in ("json", "concise"):
        reference = trainlint(str(folder), "--format", fmt, "--no-cache", "-j", "1")
        assert reference.returncode == 1 and reference.stdout
        runs = [
            trainlint(str(folder), "--format", fmt, "--no-cache", "-j", "2"),
            trainlint(str(folder), "--format", fmt, "-j", "2", cache=cache),  # cold
            trainlint(str(folder), "--format", fmt, "-j", "1", cache=cache),  # warm
            trainlint(str(folder), "--format", fmt, "-j", "2", cache=cache),  # warm
        ]
        for run in runs:
            assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)
    assert not trainlint(str(folder), "--no-cache", cache=tmp_path / "unused").returncode == 0
    assert not (tmp_path / "unused").exists()


def test_files_with_findings_are_cached_and_a_warm_run_loads_neither_libcst_nor_the_rules(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    cold = trainlint(str(folder), "--format", "json", cache=cache)
    assert len(entries(cache)) == len([p for p in folder.rglob("*") if p.is_file()])  # findings, errors, clean, refused
    warm = trainlint(str(folder), "--format", "json", cache=cache, python=("-X", "importtime"))
    assert warm.stdout == cold.stdout and '"TL401"' in warm.stdout
    loaded = [line.rsplit("|", 1)[-1].strip() for line in warm.stderr.splitlines() if "|" in line]
    assert "trainlint.cli" in loaded
    assert not [m for m in loaded if m.startswith(("libcst", "trainlint.rules", "trainlint.model", "torch"))]


def test_cache_dir_option_and_environment_choose_the_folder(tmp_path):
    folder = project(tmp_path)
    trainlint(str(folder / "step.py"), "--cache-dir", str(tmp_path / "chosen"), cache=tmp_path / "env")
    assert entries(tmp_path / "chosen") and not (tmp_path / "env").exists()
    trainlint(str(folder / "step.py"), cache=tmp_path / "env")
    assert entries(tmp_path / "env")


def test_an_edited_file_or_changed_settings_never_read_a_stale_result(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    step = folder / "step.py"
    first = trainlint(str(step), "--format", "concise", cache=cache).stdout
    assert "TL401" in first
    step.write_text(STEP.replace("    print(loss.item())\n", ""))
    edited = trainlint(str(step), "--format", "concise", cache=cache).stdout
    assert "TL401" not in edited
    assert trainlint(str(step), "--format", "concise", "--no-cache").stdout == edited
    selected = trainlint(str(step), "--format", "concise", "--select", "TL501", cache=cache).stdout
    assert selected == trainlint(str(step), "--format", "concise", "--select", "TL501", "--no-cache").stdout


def test_concurrent_runs_share_one_cache_safely(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    reference = trainlint(str(folder), "--format", "json", "--no-cache").stdout
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINLINT_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen([sys.executable, "-m", "trainlint", str(folder), "--format", "json", "-j", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert outputs == [reference] * 3
    assert trainlint(str(folder), "--format", "json", cache=cache).stdout == reference
    assert not [p for p in cache.rglob(".tmp*")]


def test_damaged_entries_are_misses(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    reference = trainlint(str(folder), "--format", "json", cache=cache).stdout
    for i, entry in enumerate(entries(cache)):
        entry.write_bytes(b"" if i % 2 else b"\x80\x04garbage")
    assert trainlint(str(folder), "--format", "json", cache=cache).stdout == reference


def test_the_cache_is_bounded(tmp_path):
    cache = Cache(tmp_path, max_entries=10)
    for i in range(25):
        cache.store(f"{i:064x}", FileResult(f"f{i}.py"))
    cache.close()
    assert 0 < len(entries(tmp_path)) <= 10


def test_outcomes_of_the_machine_are_not_cached(tmp_path):
    """A file stopped by the time limit is analysed again next time, not read back as a TL000."""
    slow = tmp_path / "slow.py"
    slow.write_text(STEP + "x = a" + ".b" * 3000 + "\n")
    settings = Settings(max_line_length=10**7, max_chain=10**6, file_timeout=0.5)
    cache = Cache(tmp_path / "cache")
    [result] = lint_paths([(slow, settings)], jobs=1, cache=cache)
    assert "used more than 0.5 s of CPU time" in result.diagnostics[0].message
    assert not entries(tmp_path / "cache")


def test_a_changed_local_module_that_a_file_imports_is_not_read_from_the_cache(tmp_path):
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    (folder / "utils.py").write_text("import torch\n\ndef log_value(v):\n    return v.item()\n")
    (folder / "train.py").write_text(
        "import torch\nfrom utils import log_value\n\nfor x, y in loader:\n"
        "    loss = criterion(model(x.to(device)), y)\n    loss.backward()\n    optimizer.step()\n"
        "    optimizer.zero_grad()\n    log_value(loss)\n"
    )
    first = trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout
    assert "TL401" in first  # the helper reads its argument on the host, as the summary of utils.py says
    (folder / "utils.py").write_text("import torch\n\ndef log_value(v):\n    return None\n")
    after = trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout
    assert "TL401" not in after
    assert after == trainlint(str(folder / "train.py"), "--format", "concise", "--no-cache").stdout


@pytest.mark.parametrize("module", ["engine", "helpers.engine"])
def test_a_module_that_appears_later_is_seen_by_a_file_the_prefilter_skipped(tmp_path, module):
    """`main.py` holds no step of its own: its loop calls `fit_batch` of `engine.py`. Without
    `engine.py` the prefilter skips the per-step rules (nothing can step); once `engine.py` exists,
    the cached result of `main.py` is not reused. In a folder that was missing too (`helpers/`), the
    paths looked for under it were recorded as that folder's absence (one state, not one per name)."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    (folder / "main.py").write_text(
        f"import torch\nfrom {module} import fit_batch\n\nfor batch in loader:\n"
        "    fit_batch(model, opt, batch)\n    torch.cuda.synchronize()\n"
    )
    before = trainlint(str(folder / "main.py"), "--format", "concise", cache=cache).stdout
    assert "TL402" not in before
    engine = folder.joinpath(*module.split(".")).with_suffix(".py")
    engine.parent.mkdir(exist_ok=True)
    engine.write_text(
        "def fit_batch(model, opt, batch):\n    loss = model(batch).mean()\n    loss.backward()\n"
        "    opt.step()\n    opt.zero_grad()\n"
    )
    after = trainlint(str(folder / "main.py"), "--format", "concise", cache=cache).stdout
    assert "main.py:6:5: TL402" in after
    assert after == trainlint(str(folder / "main.py"), "--format", "concise", "--no-cache").stdout


def test_a_path_under_a_missing_folder_is_said_missing_by_the_highest_missing_folder(tmp_path):
    from trainlint.reading import ABSENT, EXISTS, current_state, probe_state

    (tmp_path / "present.py").write_text("")
    assert probe_state(str(tmp_path / "present.py")) == (str(tmp_path / "present.py"), EXISTS, "")
    assert probe_state(str(tmp_path / "absent.py")) == (str(tmp_path / "absent.py"), ABSENT, "")
    deep = probe_state(str(tmp_path / "a" / "b" / "c.py"))
    assert deep == (str(tmp_path / "a"), ABSENT, "")
    assert current_state(deep) == deep
    (tmp_path / "a").mkdir()  # the folder appears: the state recorded no longer holds
    assert current_state(deep) != deep
    # a name under a file is missing, said by the name itself (its folder exists, as a file)
    (tmp_path / "file.py").write_text("")
    assert probe_state(str(tmp_path / "file.py" / "x.py")) == (str(tmp_path / "file.py" / "x.py"), ABSENT, "")


LOG_READS = "import torch\n\ndef log_value(v):\n    return v.item()\n"  # reads its argument on the host
LOG_KEEPS = "import torch\n\ndef log_value(v):\n    return v.iten()\n"  # the same size, reads nothing known
TRAIN = (
    "import torch\nfrom utils import log_value\n\nfor x, y in loader:\n"
    "    loss = criterion(model(x.to(device)), y)\n    loss.backward()\n    optimizer.step()\n"
    "    optimizer.zero_grad()\n    log_value(loss)\n"
)


def test_a_local_module_changed_with_its_size_and_modification_time_kept_is_not_read_from_the_cache(tmp_path):
    """`cp -p`, `touch -d` and build tools that normalise mtimes keep both: only the content tells."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    utils = folder / "utils.py"
    utils.write_text(LOG_KEEPS)
    (folder / "train.py").write_text(TRAIN)
    before = utils.stat()
    first = trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout
    assert "TL401" not in first
    utils.write_text(LOG_READS)
    assert utils.stat().st_size == before.st_size
    os.utime(utils, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout
    expected = trainlint(str(folder / "train.py"), "--format", "concise", "--no-cache").stdout
    assert "TL401" in expected
    assert after == expected


def test_a_group_of_dependencies_emptied_in_place_cannot_make_a_stale_result_a_hit(tmp_path):
    """Results name their dependencies by the hash of the group entry that lists them: a group whose
    content no longer matches its name (damaged, or emptied so that nothing is checked) is a miss."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    utils = folder / "utils.py"
    utils.write_text(LOG_KEEPS)
    (folder / "train.py").write_text(TRAIN)
    assert "TL401" not in trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout
    # (the groups are the unsigned entries: results and the project's summaries start with their MAC)
    groups = [p for p in cache.glob("v*/*/*") if p.is_file() and p.read_bytes().startswith(b"trainlint dependencies ")]
    assert groups and any(b"utils.py" in g.read_bytes() for g in groups)
    for group in groups:
        group.write_bytes(group.read_bytes().split(b"\n")[0])  # its header alone
    utils.write_text(LOG_READS)
    assert "TL401" in trainlint(str(folder / "train.py"), "--format", "concise", cache=cache).stdout


def test_results_that_share_most_dependencies_share_their_groups():
    """Each file of a project depends on a thousand states, each set a little different from the next:
    split where the paths themselves say, the sets share every group but the one holding a difference,
    so a warm run reads each shared group once."""
    common = tuple((f"/p/pkg/mod{i:04d}.py", i, "ab" * 32) for i in range(1000))
    mine = tuple(sorted((*common, ("/p/pkg/mod0500_extra.py", -1, ""))))
    theirs = tuple(sorted((*common, ("/p/pkg/mod0100_extra.py", -1, ""))))
    for states in (common, mine, theirs):
        groups = grouped(states)
        assert sum(groups, ()) == states and len(groups) > 20
    shared = set(grouped(mine)) & set(grouped(theirs))
    # (an extra path that itself ends a group splits the one it falls in: two groups)
    assert 1 <= len(grouped(mine)) - len(shared) <= 2 and 1 <= len(grouped(theirs)) - len(shared) <= 2
    assert len(shared) >= len(grouped(common)) - 2
    assert grouped(()) == []


def test_a_warm_run_reads_each_group_of_dependencies_once(tmp_path, monkeypatch):
    # every path ends a group: where groups end must not depend on the name of the test's folder
    monkeypatch.setattr(cache_module, "GROUP_EVERY", 1)
    monkeypatch.setattr(cache_module, "_ENDS_GROUP", {})
    folder, cache_folder = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("")
    (folder / "utils.py").write_text(LOG_KEEPS)
    for name in ("train.py", "train_b.py", "train_c.py"):
        (folder / name).write_text(TRAIN)
    tasks = [(str(p), Settings()) for p in sorted(folder.glob("*.py"))]
    key = b"k" * 32
    lint_paths(tasks, 1, cache=Cache(cache_folder, key=key))
    cache = Cache(cache_folder, key=key)
    read: list[str] = []
    named: list[str] = []
    original, original_group = Cache._all_hold, Cache._group_holds
    monkeypatch.setattr(Cache, "_all_hold", lambda self, items: read.append(b"\n".join(items)) or original(self, items))
    monkeypatch.setattr(Cache, "_group_holds", lambda self, group: named.append(group) or original_group(self, group))
    scripts = [task for task in tasks if "train" in task[0]]
    results = lint_paths(scripts, 1, cache=cache)
    assert cache.stored == 0 and any(b"utils.py" in r for r in read)  # every result from the cache
    assert len(read) == len(set(read)) == len(set(named))  # each group read once
    # each script depends on its own path too (whoever imports it): one group of its own, the rest shared
    assert len(named) > len(read)
    assert [d.code for r in results for d in r.diagnostics].count("TL401") == 0


def test_a_run_s_index_replaces_its_group_reads_and_still_sees_each_edit(tmp_path, monkeypatch):
    """A run of many files reads its dependencies' states from one index entry, each checked as a
    group's would be: a warm run reads no group, and an edited module still changes the result."""
    monkeypatch.setattr(cache_module, "INDEX_FROM", 2)
    folder, cache_folder = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("")
    utils = folder / "utils.py"
    utils.write_text(LOG_KEEPS)
    for name in ("train.py", "train_b.py"):
        (folder / name).write_text(TRAIN)
    tasks = [(str(p), Settings()) for p in sorted(folder.glob("*.py"))]
    key = b"k" * 32
    codes = lambda results: [d.code for r in results for d in r.diagnostics]  # noqa: E731
    assert "TL401" not in codes(lint_paths(tasks, 1, cache=Cache(cache_folder, key=key)))
    read: list[str] = []
    original = Cache._all_hold
    monkeypatch.setattr(Cache, "_all_hold", lambda self, lines: read.append("x") or original(self, lines))
    cache = Cache(cache_folder, key=key)
    assert "TL401" not in codes(lint_paths(tasks, 1, cache=cache))
    assert cache.stored == 0 and read == ["x"]  # the index's table alone: no group was read
    utils.write_text(LOG_READS)  # same size
    read.clear()
    cache = Cache(cache_folder, key=key)
    assert codes(lint_paths(tasks, 1, cache=cache)).count("TL401") == 2  # (at each call: `log_value` reads its argument)
    assert cache.stored > 0
    read.clear()
    cache = Cache(cache_folder, key=key)  # the index written at the end of that run lists the new groups
    assert codes(lint_paths(tasks, 1, cache=cache)).count("TL401") == 2 and cache.stored == 0 and read == ["x"]
    index = [p for p in cache_folder.glob("v*/*/*") if b"\nindex " in p.read_bytes()[:80]]
    assert len(index) == 1
    index[0].write_bytes(index[0].read_bytes().replace(b"index ", b"index  ", 1))  # its MAC no longer verifies
    read.clear()
    cache = Cache(cache_folder, key=key)
    assert codes(lint_paths(tasks, 1, cache=cache)).count("TL401") == 2 and cache.stored == 0 and len(read) > 1


def test_a_helper_s_cached_result_follows_the_modules_that_call_it(tmp_path):
    """A helper's finding depends on its callers: a step that stops calling it, or a new module that
    starts, changes its result."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("")
    helper = folder / "timing.py"
    helper.write_text("import torch\n\nclass StepTimer:\n    def click(self):\n        torch.cuda.synchronize()\n")
    loop = (
        "import torch\nfrom timing import StepTimer\n\ntimer = StepTimer()\nfor x, y in loader:\n"
        "    loss = criterion(model(x.to(device)), y)\n    loss.backward()\n    optimizer.step()\n"
        "    optimizer.zero_grad()\n"
    )
    run = lambda: trainlint(str(helper), "--format", "concise", cache=cache).stdout  # noqa: E731
    assert "TL402" not in run()
    (folder / "train.py").write_text(loop + "    timer.click()\n")  # a new module calls it every step
    assert "timing.py:5:9: TL402" in run()
    (folder / "train.py").write_text(loop + "    pass\n")  # and stops
    assert "TL402" not in run()


def planted_pickle(code: str) -> bytes:
    """A pickle that runs `code` when it is loaded."""

    class Payload:
        def __reduce__(self):
            return (exec, (code,))

    return pickle.dumps(Payload())


def test_a_planted_pickle_entry_is_never_executed(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    reference = trainlint(str(folder), "--format", "json", "--no-cache")
    marker = tmp_path / "ran"
    trainlint(str(folder), "--format", "json", cache=cache)
    for payload in (f"open({str(marker)!r}, 'w').write('x')", "raise SystemExit(3)"):
        for entry in entries(cache):
            entry.write_bytes(planted_pickle(payload))
        run = trainlint(str(folder), "--format", "json", cache=cache)
        assert not marker.exists()
        assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)


def test_fifos_folders_and_malformed_entries_are_misses_and_never_hang(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    reference = trainlint(str(folder), "--format", "json", "--no-cache")
    wrong_types = json.dumps({"trainlint": 999, "path": 1, "diagnostics": "x", "dependencies": None})
    damage = [
        lambda e: (e.unlink(), os.mkfifo(e)),
        lambda e: (e.unlink(), e.mkdir()),
        lambda e: (e.unlink(), e.symlink_to("/dev/zero")),
        lambda e: os.truncate(e, 64 << 20),  # sparse: a huge entry that costs no disk
        lambda e: e.write_text("{not json"),
        lambda e: e.write_text(wrong_types),
        lambda e: e.write_bytes(e.read_bytes()[: len(e.read_bytes()) // 2]),
    ]
    for harm in damage:
        trainlint(str(folder), "--format", "json", cache=cache)
        for entry in entries(cache):
            harm(entry)
        run = trainlint(str(folder), "--format", "json", cache=cache, timeout=60)  # a hang fails here
        assert (run.returncode, run.stdout, run.stderr) == (reference.returncode, reference.stdout, reference.stderr)
        shutil.rmtree(cache)


def test_the_cache_folder_is_private_to_its_user(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    trainlint(str(folder / "step.py"), cache=cache)
    folders = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    assert len(folders) >= 3 and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in folders)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in entries(cache))


def test_a_planted_pickle_in_the_run_s_shared_summary_store_is_never_executed(tmp_path):
    """Worker processes share summaries through a folder: what is read there is data, checked."""
    from trainlint.project import store
    from trainlint.project.index import Project
    from trainlint.project.store import sharing_summaries

    utils = tmp_path / "utils.py"
    utils.write_text("import torch\n\nclass StepTimer:\n    def click(self):\n        torch.cuda.synchronize()\n")
    marker = tmp_path / "ran"
    with sharing_summaries():
        expected = Project().summary(utils)
        for entry in Path(store._SHARED_FOLDER).iterdir():
            entry.write_bytes(planted_pickle(f"open({str(marker)!r}, 'w').write('x')"))
        again = Project().summary(utils)  # a fresh process's project: reads the shared store
    assert not marker.exists()
    assert again == expected and again.classes["StepTimer"].methods["click"].synchronizes


TIMER_SYNC = "import torch\n\nclass StepTimer:\n    def click(self):\n        torch.cuda.synchronize()\n"
TIMER_CLOCK = "import time\n\nclass StepTimer:\n    def click(self):\n        self.ticked = time.time()\n"


def test_a_long_lived_process_reads_a_module_again_after_rescan_even_with_its_modification_time_kept(tmp_path):
    """The language server's process: its summaries are memoised by content, checked after each rescan."""
    from trainlint.project.index import Project

    utils = tmp_path / "utils.py"
    utils.write_text(TIMER_CLOCK)
    before = utils.stat()
    project = Project()

    def synchronizes() -> bool:
        click = project.symbol(str(tmp_path / "train.py"), "utils.StepTimer.click")
        return click is not None and bool(click.synchronizes)  # type: ignore[union-attr]

    assert not synchronizes()
    utils.write_text(TIMER_SYNC)
    os.utime(utils, ns=(before.st_atime_ns, before.st_mtime_ns))
    project.rescan()
    assert synchronizes()


def test_a_long_lived_process_reads_the_project_s_imports_again_only_when_a_module_changed(tmp_path, monkeypatch):
    """Before each lint the language server rescans: the index of which module imports which is kept
    while the project's folders and modules are as they were, and read again when one changed, even
    when its size and modification time were kept."""
    from trainlint.project import importers
    from trainlint.project.index import Project

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text(TIMER_SYNC)
    caller = tmp_path / "loop.py"
    caller.write_text("import helpers\n\nfor batch in loader:\n    loss.backward()\n")
    reads = []
    monkeypatch.setattr(importers, "read_regular", lambda *args: reads.append(args[0]) or Path(args[0]).read_bytes())
    project = Project()
    target = tmp_path / "utils.py"
    assert project.importers(target) == []
    indexed = len(reads)
    assert indexed == 2
    project.rescan()
    assert project.importers(target) == [] and len(reads) == indexed  # (nothing changed: nothing read)
    before = caller.stat()
    caller.write_text("import utils  \n\nfor batch in loader:\n    loss.backward()\n")  # (as long as before)
    os.utime(caller, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert caller.stat().st_size == before.st_size
    project.rescan()
    assert project.importers(target) == [caller.resolve()] and len(reads) == 2 * indexed


def test_entries_of_earlier_formats_are_deleted_only_where_they_are_provably_the_cache_s(tmp_path):
    """A run deletes the entries of earlier formats (pickles, which must never be loaded) in a folder
    of entries only, as earlier versions wrote it; a `v<N>` folder that holds anything else was not
    written by trainlint alone (nor named by its marker, which earlier formats predate): it is left whole."""
    folder, cache = project(tmp_path), tmp_path / "cache"
    old = cache / "v1" / "ab" / ("ab" + "0" * 62)
    old.parent.mkdir(parents=True)
    old.write_bytes(planted_pickle("raise SystemExit(3)"))
    mixed = cache / "v2" / "cd" / ("cd" + "0" * 62)
    mixed.parent.mkdir(parents=True)
    mixed.write_bytes(planted_pickle("raise SystemExit(3)"))
    (cache / "v2" / "mine.txt").write_text("not an entry")
    run = trainlint(str(folder / "step.py"), cache=cache)
    assert run.returncode == 1 and "TL401" in run.stdout
    assert not (cache / "v1").exists()
    assert mixed.exists() and (cache / "v2" / "mine.txt").read_text() == "not an entry"


def test_a_cache_folder_of_another_user_is_not_used(tmp_path):
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs to hand a folder to another user")
    folder, cache = project(tmp_path), tmp_path / "cache"
    cache.mkdir()
    os.chown(cache, 65534, 65534)
    reference = trainlint(str(folder), "--format", "json", "--no-cache")
    run = trainlint(str(folder), "--format", "json", cache=cache)
    assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)
    assert not list(cache.iterdir())


def tree(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path in `folder` (and the folder itself) with its mode, and a file's bytes."""
    found = {str(p.relative_to(folder)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}
    return {**found, ".": (folder.stat().st_mode, None)}


def test_clean_leaves_a_folder_that_is_not_a_cache_as_it_was(tmp_path):
    """`clean` pointed at a data folder (by --cache-dir, or TRAINLINT_CACHE_DIR set by mistake) removes
    nothing: its `v1`, `v2_final`, even a `v3` holding a file of an entry's shape, are not provably
    trainlint's. It says what it left, and why."""
    data = tmp_path / "data"
    (data / "v1").mkdir(parents=True)
    (data / "v1" / "train.csv").write_text("x,y\n1,2\n")
    (data / "v2_final").mkdir()
    (data / "v2_final" / "weights.pt").write_bytes(b"\0" * 64)
    shaped = data / "v3" / "ab" / ("ab" + "1" * 62)
    shaped.parent.mkdir(parents=True)
    shaped.write_bytes(b"an entry's name, not an entry")
    (data / "v3" / "README.md").write_text("version 3 of the data set\n")
    (data / "notes.txt").write_text("mine\n")
    before = tree(data)
    for run in (trainlint("clean", "--cache-dir", str(data)), trainlint("clean", cache=data)):
        assert tree(data) == before
        assert run.returncode == 0 and f"No cache at {data}\n" in run.stdout
        assert f"Left {data / 'v1'}: it holds v1/train.csv, which trainlint does not write, and no trainlint marker names the folder" in run.stdout
        assert f"Left {data / 'v3'}: it holds v3/README.md, which trainlint does not write" in run.stdout
        assert f"Left 2 other files or folders in {data}, not trainlint's: notes.txt, v2_final" in run.stdout


def test_clean_removes_the_cache_s_entries_and_leaves_anything_else_there(tmp_path):
    folder, cache = project(tmp_path), tmp_path / "cache"
    trainlint(str(folder), cache=cache)
    [own] = [p for p in cache.iterdir() if p.is_dir()]
    written = len(list(own.glob("*/*")))
    assert written > len(entries(cache))  # the results, and the groups of dependencies they name
    (cache / "mine.txt").write_text("mine\n")
    (own / "notes.txt").write_text("put here by hand\n")
    run = trainlint("clean", "--cache-dir", str(cache))
    assert run.returncode == 0 and f"Removed the cache at {cache} ({written} entries)" in run.stdout
    assert f"Left {own / 'notes.txt'}: not a file trainlint writes" in run.stdout
    assert f"Left 1 other file or folder in {cache}, not trainlint's: mine.txt" in run.stdout
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) == sorted(
        ["mine.txt", "trainlint-cache.tag", own.name, f"{own.name}/notes.txt"])  # (the marker stays with its folder)
    (own / "notes.txt").unlink()
    assert f"Removed the cache at {cache} (0 entries)" in trainlint("clean", "--cache-dir", str(cache)).stdout  # (its folder)
    assert os.listdir(cache) == ["mine.txt"]
    assert f"No cache at {cache}" in trainlint("clean", "--cache-dir", str(cache)).stdout


def test_clean_removes_a_cache_written_before_the_marker_only_where_every_file_is_an_entry(tmp_path):
    cache = tmp_path / "cache"
    shard = cache / "v3" / "ab"
    shard.mkdir(parents=True)
    (shard / ("ab" + "2" * 62)).write_bytes(b'{"trainlint":3}')
    (shard / ".tmp-k2x_9q0z").write_bytes(b"half an entry")
    kept = cache / "v2" / "cd" / ("cd" + "3" * 62)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"an entry, or the user's file of that name")
    (kept.parent / "train.csv").write_text("x\n")
    run = trainlint("clean", "--cache-dir", str(cache))
    assert run.returncode == 0 and f"Removed the cache at {cache} (2 entries)" in run.stdout
    assert f"Left {cache / 'v2'}: it holds v2/cd/train.csv, which trainlint does not write" in run.stdout
    assert not (cache / "v3").exists() and kept.exists() and (kept.parent / "train.csv").exists()


def test_an_entry_written_without_the_key_can_neither_hide_findings_nor_add_a_fix(tmp_path):
    """Whoever can write the cache folder (a CI cache restored from another branch, a shared folder)
    but not read the key: an entry they plant or edit, with or without the MAC it had, is a miss."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    step = folder / "step.py"
    step.write_text(STEP)
    reference = trainlint(str(step), "--format", "json", "--no-cache")
    assert reference.returncode == 1 and '"TL401"' in reference.stdout

    def hide(entry: dict) -> None:
        entry["diagnostics"] = []

    def add_fix(entry: dict) -> None:
        for diagnostic in entry["diagnostics"]:
            diagnostic[10] = ["Planted", "safe", [[8, 4, 8, 21, "__import__('os').system('id')", None]]]

    for edit in (hide, add_fix):
        for keep_header in (False, True):
            trainlint(str(step), "--format", "json", cache=cache)  # (the genuine entry again)
            for entry in entries(cache):
                raw = entry.read_bytes()
                start = raw.index(b"{")
                data = json.loads(raw[start:])
                edit(data)
                entry.write_bytes((raw[:start] if keep_header else b"") + json.dumps(data).encode())
            run = trainlint(str(step), "--format", "json", cache=cache)
            assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)
            assert "Planted" not in run.stdout


def test_an_entry_moved_to_the_name_of_another_content_is_a_miss(tmp_path):
    """The cache holds the result of a file's earlier content, without the finding: copied over the
    entry of today's content it would hide it. An entry's MAC covers its name."""
    folder, cache = tmp_path / "project", tmp_path / "cache"
    folder.mkdir()
    step = folder / "step.py"
    step.write_text(STEP.replace("    print(loss.item())\n", ""))
    trainlint(str(step), "--format", "json", cache=cache)
    [earlier] = entries(cache)
    step.write_text(STEP)
    reference = trainlint(str(step), "--format", "json", cache=cache)
    assert '"TL401"' in reference.stdout and '"TL401"' not in earlier.read_text(errors="replace")
    [today] = [e for e in entries(cache) if e != earlier]
    today.write_bytes(earlier.read_bytes())
    run = trainlint(str(step), "--format", "json", cache=cache)
    assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)


def loaded(run: subprocess.CompletedProcess[str], module: str) -> bool:
    """Whether a run under `-X importtime` imported `module` (a warm run, all hits, loads no libcst)."""
    return any(line.rsplit("|", 1)[-1].strip() == module for line in run.stderr.splitlines() if "|" in line)


def test_a_restored_cache_hits_with_the_same_cache_key_and_misses_with_another(tmp_path):
    """CI keeps the key in TRAINLINT_CACHE_KEY (a secret): a cache restored in another job, with a
    fresh configuration folder, still hits; one written under another key is all misses."""
    folder = project(tmp_path)
    fresh = {"XDG_CONFIG_HOME": str(tmp_path / "new-job")}
    # (the caches lie in a folder of their own: the project has no marker, so its results depend on
    # the listing of the folder above it, where a new folder of a job's cache would be a new name)
    caches = tmp_path / "caches"
    first = trainlint(str(folder), "--format", "json", cache=caches / "job1", env={"TRAINLINT_CACHE_KEY": "the CI secret"})
    assert first.returncode == 1 and '"TL401"' in first.stdout
    shutil.copytree(caches / "job1", caches / "job2")
    shutil.copytree(caches / "job1", caches / "job3")
    same = trainlint(str(folder), "--format", "json", cache=caches / "job2", python=("-X", "importtime"),
                     env={**fresh, "TRAINLINT_CACHE_KEY": "the CI secret"})
    assert same.stdout == first.stdout and loaded(same, "trainlint.cli") and not loaded(same, "libcst")
    other = trainlint(str(folder), "--format", "json", cache=caches / "job3", python=("-X", "importtime"),
                      env={**fresh, "TRAINLINT_CACHE_KEY": "another secret"})
    assert other.stdout == first.stdout and loaded(other, "libcst")
    assert not (tmp_path / "new-job").exists()  # (with the key in the environment, no key file is made)


def test_the_key_file_is_private_and_outside_the_cache_and_one_others_can_read_is_refused(tmp_path):
    folder, cache, config = project(tmp_path), tmp_path / "cache", tmp_path / "config"
    env = {"XDG_CONFIG_HOME": str(config)}
    reference = trainlint(str(folder / "step.py"), "--format", "json", "--no-cache")
    assert trainlint(str(folder / "step.py"), "--format", "json", cache=cache, env=env).stdout == reference.stdout
    key = config / "trainlint" / "cache-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text().strip()) == 64
    secret = key.read_bytes()
    assert trainlint(str(folder / "step.py"), "--format", "json", cache=cache, env=env).stdout == reference.stdout
    assert key.read_bytes() == secret  # (made once, then read)
    key.chmod(0o644)
    shutil.rmtree(cache)
    run = trainlint(str(folder / "step.py"), "--format", "json", cache=cache, env=env)
    assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)
    assert f"{key} is not private to its owner" in run.stderr and "results are not cached" in run.stderr
    assert not cache.exists()


def test_an_existing_cache_folder_keeps_its_mode_and_the_entries_go_in_a_private_folder(tmp_path):
    """A CI or team folder (setgid, group-writable) named as the cache: trainlint makes a private
    folder in it, and leaves the folder's own mode alone."""
    folder, cache = project(tmp_path), tmp_path / "team-cache"
    cache.mkdir()
    cache.chmod(0o2775)
    mode = stat.S_IMODE(cache.stat().st_mode)
    assert mode & 0o775 == 0o775
    run = trainlint(str(folder / "step.py"), "--cache-dir", str(cache))
    assert run.returncode == 1 and "TL401" in run.stdout
    assert stat.S_IMODE(cache.stat().st_mode) == mode
    [own] = [p for p in cache.iterdir() if p.is_dir()]
    assert stat.S_IMODE(own.stat().st_mode) & 0o777 == 0o700 and entries(own)  # (setgid, inherited, is kept)


def test_a_folder_of_the_entries_name_that_trainlint_did_not_make_is_neither_used_nor_touched(tmp_path):
    """A data folder with its own `v4` (the entries' folder's name), pointed at as the cache: no
    marker names that folder, so trainlint neither writes in it nor changes its mode."""
    from trainlint.engine import cache as cache_module

    folder, data = project(tmp_path), tmp_path / "data"
    theirs = data / f"v{cache_module.FORMAT}"
    theirs.mkdir(parents=True)
    (theirs / "train.csv").write_text("x\n")
    theirs.chmod(0o755)
    before = tree(data)
    reference = trainlint(str(folder / "step.py"), "--format", "json", "--no-cache")
    run = trainlint(str(folder / "step.py"), "--format", "json", cache=data)
    assert (run.returncode, run.stdout) == (reference.returncode, reference.stdout)
    assert tree(data) == before


def test_a_file_edited_after_its_key_was_computed_is_analysed_as_it_is_and_not_cached(tmp_path, monkeypatch):
    """The worker reads a miss's file again (the supervisor keeps a digest, not every source): an edit
    between the key and that read is analysed as it now is, and stored under no key."""
    step = tmp_path / "step.py"
    step.write_text(STEP)
    edited = STEP.replace("    print(loss.item())\n", "")
    looked_up = Cache.lookup

    def lookup_then_edit(self, path, settings):
        answer = looked_up(self, path, settings)
        step.write_text(edited)  # (the key above is of the first content)
        return answer

    monkeypatch.setattr(Cache, "lookup", lookup_then_edit)
    cache = Cache(tmp_path / "cache")
    [result] = lint_paths([(step, Settings())], jobs=1, cache=cache)
    assert "TL401" not in [d.code for d in result.diagnostics] and cache.stored == 0
    monkeypatch.setattr(Cache, "lookup", looked_up)
    step.write_text(STEP)  # (the key's content: a miss, analysed and stored now)
    [result] = lint_paths([(step, Settings())], jobs=1, cache=cache)
    assert "TL401" in [d.code for d in result.diagnostics] and cache.stored == 1


def test_a_long_lived_process_joins_a_module_s_step_seeds_again_only_when_a_file_they_read_changed(tmp_path, monkeypatch):
    """The language server rescans before each keystroke's lint: the functions of a module that its
    callers run every step are kept while every file they were joined from is as it was (joining them
    again per keystroke took a third of the keystroke's time), and joined again when a caller changed,
    even with its size and modification time kept."""
    from trainlint.project import index
    from trainlint.project.index import Project

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text("import torch\n\ndef log(loss):\n    print(loss.item())\n")
    caller = tmp_path / "train.py"
    caller.write_text("import utils\n\nfor batch in loader:\n    loss.backward()\n    utils.log(loss)\n")
    joins = []
    joined = index.join_seeds
    monkeypatch.setattr(index, "join_seeds", lambda project, target: joins.append(target) or joined(project, target))
    project = Project()
    target = str(tmp_path / "utils.py")
    assert set(project.step_seeds(target)) == {"log"}
    assert len(joins) == 1
    project.rescan()
    assert set(project.step_seeds(target)) == {"log"} and len(joins) == 1  # (nothing changed: kept)
    before = caller.stat()
    caller.write_text("import utils\n\nfor batch in loader:\n    loss.backward()\n    utils.nop(loss)\n")  # (as long as before)
    os.utime(caller, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert caller.stat().st_size == before.st_size
    project.rescan()
    assert project.step_seeds(target) == {} and len(joins) == 2
