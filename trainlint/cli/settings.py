"""The settings of `trainlint check`: each file's nearest configuration with the command line on top,
and `--show-settings`, which says where each setting came from."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from trainlint.cli.common import EXIT_CLEAN, EXIT_ERROR, _warn, writing_to

if TYPE_CHECKING:
    from trainlint.config import Settings, SettingsResolver


def split_codes(values: Sequence[str]) -> list[str] | None:
    """`--select TL1,TL401 --select ALL` as one list of upper-case codes; None when not given."""
    if not values:
        return None
    return [c.strip().upper() if c.strip().upper() != "ALL" else "ALL" for v in values for c in v.split(",") if c.strip()]


@dataclass(frozen=True)
class SettingOptions:
    """The options of `check` that change settings (empty or None: not given)."""

    config: tuple[str, ...] = ()  # a configuration file, and/or TOML `KEY = VALUE` overrides
    isolated: bool = False
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    file_timeout: float | None = None
    file_memory: int | None = None
    preview: bool | None = None
    ignore_noqa: bool = False


def settings_resolver(options: SettingOptions) -> SettingsResolver:
    """Each file's settings: `--isolated` (no file), else `--config FILE`, else the file's nearest
    configuration; then `--config KEY = VALUE`; then the other options. Raises ConfigError."""
    from trainlint.config import ConfigError, SettingsResolver, parse_inline, with_overrides

    files = [c for c in options.config if "=" not in c]
    if len(files) > 1:
        raise ConfigError(f"--config: one configuration file at most, got {', '.join(files)}")
    if files and not Path(files[0]).is_file():
        raise ConfigError(f"--config {files[0]!r}: no such file (a `KEY = VALUE` override needs an `=`)")
    inline = [parse_inline(c) for c in options.config if "=" in c]
    per_file = []
    for value in options.per_file_ignores:
        pattern, _, codes = value.rpartition(":")
        if not pattern or not codes.strip():
            raise ConfigError(f"--per-file-ignores {value!r}: expected PATTERN:CODES, e.g. 'tests/*.py:TL401'")
        per_file.append((pattern, tuple(split_codes([codes]) or ())))

    def command_line(base: Settings) -> Settings:
        o = options
        given = with_overrides(
            base,
            select=tuple(split_codes(o.select) or ()) if o.select else None,
            ignore=tuple(base.ignore) + tuple(split_codes(o.ignore) or ()) if o.ignore else None,
            extend_select=tuple(base.extend_select) + tuple(split_codes(o.extend_select) or ()) if o.extend_select else None,
            exclude=tuple(base.exclude) + tuple(o.exclude) if o.exclude else None,
            per_file_ignores=base.per_file_ignores + tuple(per_file) if per_file else None,
            file_timeout=o.file_timeout,
            file_memory=o.file_memory,
            preview=o.preview,
            ignore_noqa=True if o.ignore_noqa else None,
        )
        return given

    return SettingsResolver(Path(files[0]) if files else None, inline, options.isolated, command_line)


def warn_preview_selected(settings: Settings) -> None:
    """Like ruff: naming a preview rule does not enable it outside preview mode; say so rather than stay silent."""
    named = (*(settings.select or ()), *settings.extend_select)
    if settings.preview or not any(len(code) == 5 for code in named):
        return  # no rule named by its full code: the rules (and libcst) need not be imported
    from trainlint.rules import preview_selected_without_preview

    for code in preview_selected_without_preview(settings):
        _warn(f"{code} is a preview rule: it runs only with --preview (or `preview = true` in [tool.trainlint])")


def print_settings(settings: Settings, path: Path) -> None:
    """`--show-settings`: the settings `path` gets, one `key = value` line each (JSON values; `(none)`
    when unset), each configured one with the file (or the command line) it came from."""
    from trainlint.rules import enabled_codes

    rows = {
        "file": str(path),
        "config": str(settings.config_path) if settings.config_path else None,
        "root": str(settings.root),
        "rules": [*enabled_codes(settings), *(["TL001"] if settings.reports_unused_noqa(path) else [])],
        "select": list(settings.select) if settings.select is not None else None,
        "ignore": list(settings.ignore),
        "extend-select": list(settings.extend_select),
        "exclude": list(settings.exclude),
        "per-file-ignores": {pattern: list(codes) for pattern, codes in settings.per_file_ignores},
        "ignored-here": sorted(settings.ignored_for(path)),
        "step-functions": sorted(settings.step_functions),
        "gate-names": sorted(settings.gate_names),
        "max-file-size": settings.max_file_size,
        "file-timeout": settings.file_timeout,
        "file-memory": settings.file_memory,
        "preview": settings.preview,
        "baseline": str(settings.baseline) if settings.baseline else None,
        "lint-test-code": settings.lint_test_code,
        "ignore-noqa": settings.ignore_noqa,
        "output-format": settings.output_format,
        "cache-dir": str(settings.cache_dir) if settings.cache_dir else None,
        "force-exclude": settings.force_exclude,
    }
    origins = dict(settings.origins)
    for key, value in rows.items():
        shown = json.dumps(value) if value is not None else "(none)"
        origin = origins.get(key) or ("command line" if key == "ignore-noqa" and value else None)
        click.echo(f"{key} = {shown}" + (f"  # from {origin}" if origin else ""))



def show_imports_and_exit(path: Path) -> None:
    """`--show-imports FILE`, then exit: 0, or 2 when `path` is not one readable Python file."""
    with writing_to(what="imports"):
        shown = print_imports(path)
    if not shown:
        _warn(f"--show-imports needs one Python file; {path} is none", prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_CLEAN)


def print_imports(path: Path) -> bool:
    """`--show-imports FILE`: the file's project root (and why), the folders its absolute imports are
    looked for in, then each import statement with the local file it resolved to (`not local` for a
    library's module). False when `path` is not a readable Python file."""
    import ast
    import os

    from trainlint.model.modules_by_name import modules_named
    from trainlint.project.index import Project
    from trainlint.project.roots import project as project_of, roots
    from trainlint.reading import MAX_MODULE_BYTES, module_code, read_state

    _, data = read_state(str(path), MAX_MODULE_BYTES)
    if data is None or not path.is_file():
        return False
    try:
        tree = ast.parse(module_code(str(path), data))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    found = roots(path)
    project = Project()

    def shown(file: Path) -> str:
        absolute = os.path.abspath(file)
        relative = os.path.relpath(absolute)
        return relative if not relative.startswith("..") else absolute

    click.echo(f"file = {path}")
    root, why, _ = project_of(path)
    click.echo(f"project root = {shown(root)}  # {why}")
    click.echo(f"search path = {json.dumps([shown(p) for p in found.search(path.parent)])}")
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda n: n.lineno):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            text = "import " + ", ".join(a.name for a in node.names)
            for alias in node.names:
                file = project.imported_file(path, alias.name)
                targets.append(shown(file) if file is not None else "not local")
        else:
            module = node.module or ""
            text = f"from {'.' * node.level}{module} import " + ", ".join(a.name for a in node.names)
            file = project.imported_file(path, module, node.level)
            # `from pkg import mod`: the names that are modules of the package resolve to their files
            subs = [project.imported_file(path, f"{module}.{a.name}" if module else a.name, node.level) for a in node.names if a.name != "*"]
            files = [f for f in subs if f is not None] or ([file] if file is not None else [])
            targets = [shown(f) for f in dict.fromkeys(files)] or ["not local"]
        click.echo(f"{node.lineno}: {text} -> {', '.join(targets)}")
    for name in modules_named(module_code(str(path), data)):  # `importlib.import_module(args.model)`
        file = project.imported_file(path, name)
        click.echo(f"importlib.import_module: {name} -> {shown(file) if file is not None else 'not local'}")
    return True
