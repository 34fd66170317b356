"""Extract the pinned repositories of manifest.toml into a corpus folder outside this repository.

    python benchmarks/realworld/extract.py [--corpus DIR] [--mirror DIR] [--repo OWNER/NAME]

Each repository's `paths` are taken at its pinned `commit` with `git archive` from a local git
directory (a mirror: DIR/<owner>+<name>/, the git directory inside it found automatically), or,
when no mirror holds it, from a partial `git clone` of https://github.com/<owner>/<name> made in
a temporary folder. Only Python files and JSON files (DeepSpeed configs) are written, to
CORPUS/<owner>__<name>/, which is emptied first so that a re-run reproduces the pinned snapshot.
An entry's optional `rules` (a list of rule codes) says that only those rules' findings on it are
labelled; it is checked here and shown with the entry, and score.py scores only those findings.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"
KEPT_SUFFIXES = (".py", ".json", ".ipynb")
RULE_CODE = re.compile(r"TL\d{3}")


@dataclass(frozen=True)
class RepoSpec:
    """One `[[repo]]` entry of the manifest."""

    name: str
    commit: str
    paths: tuple[str, ...]
    style: str
    # `rules = ["TL205", ...]`: only these rules' findings on this repository are labelled (and scored);
    # None, the field absent: every finding is labelled
    rules: tuple[str, ...] | None = None

    @property
    def folder(self) -> str:
        """The corpus folder name: `owner__name` (a slash cannot be part of a folder name)."""
        return self.name.replace("/", "__")


# the main set, and the sealed split scored once at the end of a piece of analysis work (sealed/README.md)
SPLITS = {"main": HERE, "sealed": HERE / "sealed"}


def load_manifest(path: Path = MANIFEST) -> list[RepoSpec]:
    """The manifest's repositories, in file order; a malformed `rules` field stops the run."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return [
        RepoSpec(r["name"], r["commit"], tuple(r.get("paths", ["."])), r.get("style", ""), _rules(r))
        for r in data.get("repo", [])
    ]


def _rules(entry: dict) -> tuple[str, ...] | None:
    """An entry's `rules`: None when absent (all rules labelled), else a non-empty list of rule codes."""
    if "rules" not in entry:
        return None
    rules = entry["rules"]
    if (
        not isinstance(rules, list)
        or not rules
        or not all(isinstance(r, str) and RULE_CODE.fullmatch(r) for r in rules)
        or len(set(rules)) != len(rules)
    ):
        raise SystemExit(f"{entry.get('name', '?')}: `rules` must be a non-empty list of distinct codes like \"TL205\"")
    return tuple(rules)


def default_corpus(split: str = "main") -> Path:
    """$TRAINLINT_REALWORLD, else ~/.cache/trainlint-realworld (never inside the repository); the sealed
    split in a folder of its own beside it, so that nothing run over the main set ever reads it."""
    env = os.environ.get("TRAINLINT_REALWORLD")
    main = Path(env).expanduser() if env else Path.home() / ".cache" / "trainlint-realworld"
    return main if split == "main" else main.with_name(f"{main.name}-{split}")


def _git(args: list[str], git_dir: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["git"] + (["--git-dir", str(git_dir)] if git_dir is not None else [])
    return subprocess.run(prefix + args, capture_output=True, **kwargs)


def find_git_dir(mirror_root: Path, spec: RepoSpec) -> Path | None:
    """A git directory under MIRROR/<owner>+<name>/ that holds the pinned commit, if any."""
    base = mirror_root / spec.name.replace("/", "+")
    if not base.is_dir():
        return None
    candidates = [base, base / ".git", *sorted(p for p in base.iterdir() if p.is_dir())]
    candidates += [p / ".git" for p in candidates[2:]]
    for candidate in candidates:
        if not (candidate / "HEAD").is_file():
            continue
        if _git(["cat-file", "-e", f"{spec.commit}^{{commit}}"], candidate).returncode == 0:
            return candidate
    return None


def clone(spec: RepoSpec, into: Path) -> Path:
    """A blob-less bare clone of the GitHub repository, holding the pinned commit."""
    url = f"https://github.com/{spec.name}"
    done = _git(["clone", "--bare", "--filter=blob:none", url, str(into)])
    if done.returncode != 0:
        raise RuntimeError(f"git clone {url} failed: {done.stderr.decode(errors='replace').strip()}")
    return into


def wanted_files(git_dir: Path, spec: RepoSpec) -> list[str]:
    """The Python and JSON files under the spec's paths, and the files they name, at its commit (mirrors
    may lack large blobs)."""
    paths = [p for p in spec.paths if p not in (".", "")]
    done = _git(["ls-tree", "-r", "-z", "--name-only", spec.commit, "--", *paths], git_dir)
    if done.returncode != 0:
        raise RuntimeError(f"git ls-tree failed for {spec.name}: {done.stderr.decode(errors='replace').strip()}")
    # (and a file the spec names itself, whatever its suffix: a script `train` that trainlint lints when named)
    names = [n for n in done.stdout.decode("utf-8", errors="surrogateescape").split("\0") if n.endswith(KEPT_SUFFIXES) or n in paths]
    # a JSON data file (a dataset) whose blob the mirror left out is skipped; a missing module is an error
    query = "".join(f"{spec.commit}:{n}\n" for n in names).encode("utf-8", "surrogateescape")
    checked = _git(["cat-file", "--batch-check"], git_dir, input=query)
    missing = [line.endswith(b" missing") for line in checked.stdout.splitlines()] if checked.returncode == 0 else []
    if len(missing) != len(names):
        return names
    return [n for n, gone in zip(names, missing) if not (gone and not n.endswith(".py"))]


def archive(git_dir: Path, spec: RepoSpec, dest: Path) -> tuple[int, int]:
    """Write the spec's Python/JSON files at its commit under `dest`; returns (files, lines) written."""
    names = wanted_files(git_dir, spec)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    files = lines = 0
    for start in range(0, len(names), 400):  # several archives: command lines stay short
        chunk = names[start : start + 400]
        done = _git(["archive", "--format=tar", spec.commit, "--", *(f":(literal){n}" for n in chunk)], git_dir)
        if done.returncode != 0:
            raise RuntimeError(f"git archive failed for {spec.name}: {done.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                target = (dest / member.name).resolve()
                if dest.resolve() not in target.parents:  # a hostile path never escapes the corpus
                    continue
                data = tar.extractfile(member).read()
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                files += 1
                if member.name.endswith(".py") or member.name in spec.paths:
                    lines += data.count(b"\n")
    # the folder stands for the repository's checkout: mark its root, as `.git` or `pyproject.toml` marks
    # a real one, so that the project phase finds the modules that import a file from anywhere in it
    marker = dest / "pyproject.toml"
    if not marker.exists():
        marker.write_text("# the root of an extracted repository (benchmarks/realworld/extract.py)\n")
    return files, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=None, help="where the repositories are extracted (default: per split)")
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--repo", action="append", help="only this repository (repeatable)")
    parser.add_argument("--split", choices=SPLITS, default="main", help="which manifest: the main set, or the sealed split")
    args = parser.parse_args(argv)
    args.corpus = args.corpus or default_corpus(args.split)
    corpus = args.corpus.expanduser().resolve()
    if HERE.parents[1] in (corpus, *corpus.parents):
        parser.error(f"the corpus must live outside the repository, not in {corpus}")
    specs = [s for s in load_manifest(SPLITS[args.split] / "manifest.toml") if not args.repo or s.name in args.repo]
    total_files = total_lines = 0
    failures = 0
    for spec in specs:
        try:
            git_dir = find_git_dir(args.mirror, spec)
            with tempfile.TemporaryDirectory() as tmp:
                if git_dir is None:
                    git_dir = clone(spec, Path(tmp) / "clone.git")
                files, lines = archive(git_dir, spec, corpus / spec.folder)
        except (RuntimeError, OSError, tarfile.TarError) as exc:
            print(f"{spec.name:40} FAILED: {exc}", file=sys.stderr)
            failures += 1
            continue
        total_files += files
        total_lines += lines
        # a repository labelled for some rules only says which: its other findings are not scored
        only = f"  (labelled for {', '.join(spec.rules)} only)" if spec.rules is not None else ""
        print(f"{spec.name:40} {files:6} files {lines:8} lines{only}")
    print(f"{'total':40} {total_files:6} files {total_lines:8} lines -> {corpus}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
