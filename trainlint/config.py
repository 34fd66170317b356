"""`[tool.trainlint]` in pyproject.toml: discovery, validation and the resolved settings."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path

import re

from trainlint.reading import resolved

UNUSED_NOQA_CODE = "TL001"  # see trainlint.noqa

KNOWN_KEYS = {
    "select": list,
    "ignore": list,
    "extend-select": list,
    "exclude": list,
    "extend-exclude": list,
    "per-file-ignores": dict,
    "step-functions": list,
    "gate-names": list,
    "max-file-size": int,
    "max-line-length": int,
    "max-nesting": int,
    "max-chain": int,
    "file-timeout": float,
    "file-memory": int,
    "preview": bool,
    "baseline": str,
    "lint-test-code": bool,
}
_SELECTORS = ("select", "ignore", "extend_select", "per_file_ignores")
_POSITIVE = ("max-file-size", "max-line-length", "max-nesting", "max-chain", "file-timeout", "file-memory")
NOTEBOOK_READ_FACTOR = 20  # a notebook may be this many times max-file-size, outputs included
DEFAULT_EXCLUDES = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "site-packages", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class Limits:
    """How much nesting and how long a line a file may have before the pre-check refuses it."""

    max_line_length: int = 20_000
    max_nesting: int = 100  # nested brackets
    max_chain: int = 500  # operands or branches chained in one expression or `if` statement


@dataclass
class AnalysisSettings:
    """Project-specific names the analysis should know (from `[tool.trainlint]`)."""

    step_functions: frozenset[str] = frozenset()
    gate_names: frozenset[str] = frozenset()
    lint_test_code: bool = False  # test code (`tests/`, `test_*.py`) checked as training code too


class ConfigError(Exception):
    """An invalid configuration: unknown key, wrong type, unknown rule code."""


@dataclass(frozen=True)
class Settings:
    """Everything a lint run needs to know, after merging pyproject and command-line options."""

    root: Path = field(default_factory=Path.cwd)
    config_path: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    step_functions: frozenset[str] = frozenset()
    gate_names: frozenset[str] = frozenset()
    max_file_size: int = 5_000_000
    max_line_length: int = 20_000
    max_nesting: int = 100
    max_chain: int = 500
    file_timeout: float = 20.0  # CPU seconds one file's analysis may take
    file_memory: int = 1024  # MB one worker may use on top of its start-up size
    show_steps: bool = False  # report the step scope of each file (`--show-steps`), not cached
    preview: bool = False  # rules still in preview run too (`--preview`, `preview = true`)
    ignore_noqa: bool = False  # `--ignore-noqa`: report what `# noqa` comments suppress
    baseline: Path | None = None  # findings recorded here are not reported (`report/baseline.py`)
    lint_test_code: bool = False  # per-step rules check `tests/` and `test_*.py` too

    def rule_selectors(self) -> tuple[list[str] | None, list[str], list[str]]:
        """The rule selectors (select, ignore, extend-select), without those naming only TL001."""
        return (
            _rule_selectors(self.select) if self.select is not None else None,
            _rule_selectors(self.ignore),
            _rule_selectors(self.extend_select),
        )

    def reports_unused_noqa(self, path: Path | None = None) -> bool:
        """Whether TL001 unused-noqa is selected (off by default, like ruff's RUF100), for `path`'s ignores."""

        def specificity(selectors: tuple[str, ...] | frozenset[str]) -> int:
            return max((len(s) if s != "ALL" else 0 for s in selectors if s == "ALL" or UNUSED_NOQA_CODE.startswith(s)), default=-1)

        on = max(specificity(self.select) if self.select is not None else -1, specificity(self.extend_select))
        off = specificity((*self.ignore, *(self.ignored_for(path) if path is not None else ())))
        return on >= 0 and on > off

    def ignored_for(self, path: Path) -> frozenset[str]:
        """Codes that per-file-ignores switch off for this file (prefixes expanded by the caller)."""
        rel = _relative(path, self.root)
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if fnmatch(rel, pattern) or fnmatch(path.name, pattern):
                out.update(codes)
        return frozenset(out)

    def read_limit(self, name: str) -> int:
        """The most bytes read of the file `name`: max-file-size, except for a notebook, whose
        outputs (images, logs) are not linted: its code cells are held to max-file-size instead."""
        return self.max_file_size * NOTEBOOK_READ_FACTOR if name.endswith(".ipynb") else self.max_file_size

    def limits(self) -> Limits:
        """What the pre-check refuses before parsing."""
        return Limits(self.max_line_length, self.max_nesting, self.max_chain)

    def analysis(self) -> AnalysisSettings:
        """The names the analysis takes from the configuration."""
        return AnalysisSettings(step_functions=self.step_functions, gate_names=self.gate_names, lint_test_code=self.lint_test_code)


def _rule_selectors(selectors: tuple[str, ...] | list[str]) -> list[str]:
    """Selectors without those naming only TL001 (a code of the suppression layer, not a rule class)."""
    return [s for s in selectors if s == "ALL" or not UNUSED_NOQA_CODE.startswith(s) or any(c.startswith(s) for c in rule_codes_on_disk())]


def _relative(path: Path, root: Path) -> str:
    try:
        return resolved(path).relative_to(resolved(root)).as_posix()
    except ValueError:
        return path.as_posix()


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.trainlint] table, walking up from `start`."""
    here = resolved(start)
    try:
        if here.is_file() or not here.exists():
            here = here.parent
    except OSError:  # a path under an unsearchable folder: start from the folder
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if _is_file(candidate):
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return candidate  # let load_settings report what is wrong with it
            if "trainlint" in data.get("tool", {}):
                return candidate
    return None


def _string_list(key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.trainlint] {key}: expected a list of strings, got {value!r}")
    return tuple(value)


def load_settings(config_path: Path | None) -> Settings:
    """Read and validate a pyproject's [tool.trainlint] table; defaults when there is none."""
    if config_path is None:
        return Settings()
    try:
        data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config_path}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path}: invalid TOML: {exc}") from exc
    table = data.get("tool", {}).get("trainlint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{config_path}: [tool.trainlint] must be a table")
    for key, value in table.items():
        if key not in KNOWN_KEYS:
            known = ", ".join(sorted(KNOWN_KEYS))
            raise ConfigError(f"{config_path}: unknown key [tool.trainlint] {key!r} (known keys: {known})")
        expected = (int, float) if KNOWN_KEYS[key] is float else KNOWN_KEYS[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise ConfigError(f"{config_path}: [tool.trainlint] {key}: expected {KNOWN_KEYS[key].__name__}, got {value!r}")
        if key in _POSITIVE and value <= 0:
            raise ConfigError(f"{config_path}: [tool.trainlint] {key}: expected a positive number, got {value!r}")
    per_file: list[tuple[str, tuple[str, ...]]] = []
    for pattern, codes in table.get("per-file-ignores", {}).items():
        per_file.append((pattern, _string_list(f"per-file-ignores.{pattern!r}", codes)))
    settings = Settings(
        root=config_path.parent,
        config_path=config_path,
        select=_string_list("select", table["select"]) if "select" in table else None,
        ignore=_string_list("ignore", table.get("ignore", [])),
        extend_select=_string_list("extend-select", table.get("extend-select", [])),
        exclude=_string_list("exclude", table.get("exclude", [])) + _string_list("extend-exclude", table.get("extend-exclude", [])),
        per_file_ignores=tuple(per_file),
        step_functions=frozenset(_string_list("step-functions", table.get("step-functions", []))),
        gate_names=frozenset(_string_list("gate-names", table.get("gate-names", []))),
        max_file_size=table.get("max-file-size", 5_000_000),
        max_line_length=table.get("max-line-length", Settings.max_line_length),
        max_nesting=table.get("max-nesting", Settings.max_nesting),
        max_chain=table.get("max-chain", Settings.max_chain),
        file_timeout=float(table.get("file-timeout", Settings.file_timeout)),
        file_memory=table.get("file-memory", Settings.file_memory),
        preview=table.get("preview", False),
        baseline=config_path.parent / table["baseline"] if "baseline" in table else None,
        lint_test_code=table.get("lint-test-code", False),
    )
    validate(settings)
    return settings


def validate(settings: Settings) -> None:
    """Raise ConfigError when a selector names no rule.

    Checked against the rule modules' file names (`tl101_....py`), so that validating a
    configuration does not import the rules; a test keeps the two lists equal.
    """
    known = rule_codes_on_disk() | {UNUSED_NOQA_CODE}
    checks = [("select", settings.select or ()), ("ignore", settings.ignore), ("extend-select", settings.extend_select)]
    checks += [("per-file-ignores", codes) for _, codes in settings.per_file_ignores]
    for where_in, selectors in checks:
        for s in selectors:
            if s != "ALL" and not any(code.startswith(s) for code in known):
                where = settings.config_path or "command line"
                raise ConfigError(
                    f"{where}: {where_in}: {s!r} matches no rule code (codes look like TL101; prefixes like TL4 select a group)"
                )


_RULE_MODULE = re.compile(r"(tl\d+)_\w+\.py$")


def rule_codes_on_disk() -> frozenset[str]:
    """The codes of the rule modules in trainlint/rules, read from their file names."""
    folder = Path(__file__).with_name("rules")
    return frozenset(m.group(1).upper() for name in os.listdir(folder) if (m := _RULE_MODULE.match(name)))


def with_overrides(settings: Settings, **overrides: object) -> Settings:
    """Command-line options win over the file; None means "not given"."""
    given = {k: v for k, v in overrides.items() if v is not None}
    # a bad code given here is blamed on the command line, not on the configuration file
    validate(replace(Settings(), **{k: v for k, v in given.items() if k in _SELECTORS}))  # type: ignore[arg-type]
    merged = replace(settings, **given)  # type: ignore[arg-type]
    validate(merged)
    return merged
