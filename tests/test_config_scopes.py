"""Configuration per folder, as in ruff: each file takes its nearest configuration (pyproject.toml,
trainlint.toml, .trainlint.toml), `extend` builds on another, `--config` names a file or overrides a
key, `--isolated` reads none, and `--show-settings` says where each setting came from."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from trainlint.cli import main
from trainlint.config import SCHEMA_FILE, ConfigError, Settings, SettingsResolver, find_config, json_schema, load_settings

STEP = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        optimizer.zero_grad()
        scale = torch.full((4,), 0.5).to("cuda")
        loss = model(x.cuda() * scale).sum()
        loss.backward()
        optimizer.step()
        print(loss.item())
    """
)


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", *args])
    return result.exit_code, result.output


@pytest.fixture
def monorepo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """a/ and b/ with their own settings; b extends the root's."""
    for folder in ("a", "b", "b/generated"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "train.py").write_text(STEP)
    (tmp_path / "pyproject.toml").write_text('[tool.trainlint]\nselect = ["TL4"]\nexclude = ["generated/"]\nextend-select = ["TL403"]\n')
    (tmp_path / "a" / "pyproject.toml").write_text('[tool.trainlint]\nselect = ["TL406"]\n')
    (tmp_path / "b" / "trainlint.toml").write_text('extend = "../pyproject.toml"\nignore = ["TL401"]\nextend-select = ["TL402"]\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_each_file_gets_its_nearest_configuration_whatever_the_order_of_paths(monorepo: Path):
    first = check("b", "a")
    second = check("a", "b")
    assert first == second
    out = first[1]
    assert "a/train.py:7:13: TL406" in out and "a/train.py:11" not in out  # a selects only TL406
    assert "b/train.py:11" not in out  # b ignores TL401 ...
    assert "b/train.py:7:13: TL406" in out  # ... and keeps the root's TL4 selection, which it extends


def test_extend_accumulates_extend_select_and_names_origins(monorepo: Path):
    settings = load_settings(monorepo / "b" / "trainlint.toml")
    assert settings.select == ("TL4",) and settings.ignore == ("TL401",)
    assert settings.extend_select == ("TL403", "TL402") and settings.exclude == ("generated/",)
    origins = dict(settings.origins)
    assert origins["select"] == str(monorepo / "pyproject.toml") and origins["ignore"] == str(monorepo / "b" / "trainlint.toml")
    out = CliRunner().invoke(main, ["check", "--show-settings", "b/train.py"]).output
    assert f'select = ["TL4"]  # from {monorepo / "pyproject.toml"}' in out
    assert f'config = "{monorepo / "b" / "trainlint.toml"}"' in out


def test_nested_configuration_excludes_apply_to_its_files(monorepo: Path):
    assert "generated" not in check(".")[1]
    assert "generated" not in check("b")[1]


def test_extend_cycle_and_missing_base_are_errors(tmp_path: Path):
    (tmp_path / "trainlint.toml").write_text('extend = "other.toml"\n')
    (tmp_path / "other.toml").write_text('extend = "trainlint.toml"\n')
    with pytest.raises(ConfigError, match="cycle"):
        load_settings(tmp_path / "trainlint.toml")
    (tmp_path / "other.toml").unlink()
    with pytest.raises(ConfigError, match="is not a file"):
        load_settings(tmp_path / "trainlint.toml")


def test_dot_trainlint_toml_wins_over_trainlint_toml_and_pyproject(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.trainlint]\nselect = ["TL1"]\n')
    assert find_config(tmp_path / "x.py") == tmp_path / "pyproject.toml"
    (tmp_path / "trainlint.toml").write_text('select = ["TL2"]\n')
    assert find_config(tmp_path / "x.py") == tmp_path / "trainlint.toml"
    (tmp_path / ".trainlint.toml").write_text('select = ["TL3"]\n')
    assert load_settings(find_config(tmp_path / "x.py")).select == ("TL3",)


def test_config_overrides_keys_and_isolated_reads_no_file(monorepo: Path):
    code, out = check("a", "--config", 'select = ["TL401"]')
    assert "TL401" in out and "TL406" not in out
    code, out = check("a", "--isolated")
    assert "TL401" in out and "TL406" in out  # the defaults
    code, out = check("a", "--config", "selec = 1")
    assert code == 2 and "unknown key 'selec'" in out
    code, out = check("a", "--config", "nothere.toml")
    assert code == 2 and "no such file" in out
    # precedence: command line > nearest configuration > what it extends
    settings = SettingsResolver(inline=[{"ignore": ["TL402"]}]).for_path(monorepo / "b" / "train.py")
    assert settings.ignore == ("TL402",) and settings.select == ("TL4",)


def test_per_file_ignores_use_gitignore_globs_with_negation(tmp_path: Path):
    settings = Settings(root=tmp_path, per_file_ignores=(("scripts/*.py", ("TL401",)), ("!src/**", ("TL402",))))
    assert settings.ignored_for(tmp_path / "scripts" / "a.py") == {"TL401", "TL402"}
    assert settings.ignored_for(tmp_path / "scripts" / "deep" / "a.py") == {"TL402"}  # `*` stays in its folder
    assert settings.ignored_for(tmp_path / "src" / "pkg" / "a.py") == frozenset()


def test_published_schema_is_current_and_checks_configurations(tmp_path: Path):
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema(), "run `python -m trainlint.config`"
    good = {"select": ["TL4", "ALL"], "per-file-ignores": {"tests/*": ["TL401"]}, "preview": True, "file-timeout": 2.5}
    jsonschema.validate(good, json_schema())
    for bad in ({"selects": ["TL4"]}, {"select": "TL4"}, {"max-file-size": 0}, {"select": ["E501"]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, json_schema())


def test_one_resolver_gives_each_folder_its_nearest_configuration_in_any_order(tmp_path, monkeypatch):
    """A run resolves many folders with one resolver, which remembers the folders it searched: a
    folder below one already answered still finds its own configuration, and a project's
    pyproject.toml without a [tool.trainlint] table is read once, not once per folder below it."""
    import tomllib

    root = tmp_path / "repo"
    (root / "a" / "b").mkdir(parents=True)
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.trainlint]\nselect = ['TL4']\n")
    (root / "a" / "pyproject.toml").write_text("[project]\nname = 'a'\n")  # no table: not a configuration
    (root / "sub" / ".trainlint.toml").write_text("select = ['TL1']\n")
    reads = []
    real_loads = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda text: reads.append(text) or real_loads(text))
    resolver = SettingsResolver()
    files = ["x.py", "a/b/y.py", "a/z.py", "sub/deep/w.py", "sub/v.py", "a/b/u.py"]
    found = {name: resolver.config_for(root / name) for name in files}
    assert found == {
        "x.py": root / "pyproject.toml",
        "a/b/y.py": root / "pyproject.toml",
        "a/z.py": root / "pyproject.toml",
        "sub/deep/w.py": root / "sub" / ".trainlint.toml",
        "sub/v.py": root / "sub" / ".trainlint.toml",
        "a/b/u.py": root / "pyproject.toml",
    }
    assert len([text for text in reads if "name = 'a'" in text]) == 1
    assert found == {name: find_config(root / name) for name in files}  # (each alone, as before)
