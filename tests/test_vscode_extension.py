"""The VS Code extension (editors/vscode/) as `@vscode/vsce` packages it: the manifest in the .vsix
activates on Python files and notebooks, contributes the settings the server reads, and bundles its
language client; activated with VS Code's API stubbed, it starts `trainlint lsp` with those settings.

The package is the one `.ci/run` built (`TRAINLINT_VSIX`), else one built here with npm; the tests are
skipped where npm or its registry is unavailable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from trainlint.lsp.options import EditorOptions, parse_options

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "editors" / "vscode"
ACTIVATE = Path(__file__).resolve().parent / "vscode" / "activate.js"
SETTINGS = {"trainlint.path", "trainlint.select", "trainlint.ignore", "trainlint.preview", "trainlint.configPath"}


def build_vsix(work: Path) -> Path:
    """Package a copy of the extension as CI does: `npm ci`, then vsce (skips when npm cannot)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (.ci/run installs Debian's npm)")
    copy = work / "vscode"
    shutil.copytree(EXTENSION, copy, ignore=shutil.ignore_patterns("node_modules", "*.vsix"))
    try:
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=copy, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("npm ci timed out (no registry?)")
    if installed.returncode != 0:
        pytest.skip(f"npm ci failed (no registry?): {installed.stderr[-500:]}")
    vsix = work / "trainlint.vsix"
    packaged = subprocess.run(
        [npm, "exec", "--no", "--", "vsce", "package", "--skip-license", "-o", str(vsix)],
        cwd=copy, capture_output=True, text=True, timeout=300,
    )
    assert packaged.returncode == 0, packaged.stdout[-2000:] + packaged.stderr[-2000:]
    return vsix


@pytest.fixture(scope="module")
def vsix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = os.environ.get("TRAINLINT_VSIX")
    if built:
        return Path(built)
    return build_vsix(tmp_path_factory.mktemp("vsix"))


@pytest.fixture(scope="module")
def manifest(vsix: Path) -> dict:
    with zipfile.ZipFile(vsix) as archive:
        return json.loads(archive.read("extension/package.json"))


def test_manifest_activates_on_python_and_notebooks(vsix: Path, manifest: dict):
    assert {"onLanguage:python", "onNotebook:jupyter-notebook"} <= set(manifest["activationEvents"])
    assert manifest["main"] == "./extension.js"
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        vsixmanifest = archive.read("extension.vsixmanifest").decode()
    assert "extension/extension.js" in names and "extension/README.md" in names
    assert 'Id="trainlint"' in vsixmanifest and 'Publisher="trainlint"' in vsixmanifest
    assert not any(name.endswith(".vsix") for name in names)


def test_language_client_is_bundled(vsix: Path, manifest: dict):
    assert "vscode-languageclient" in manifest["dependencies"]
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
    for package in ("vscode-languageclient", "vscode-languageserver-protocol", "vscode-jsonrpc"):
        assert f"extension/node_modules/{package}/package.json" in names, package
    assert "extension/node_modules/vscode-languageclient/node.js" in names
    assert not any(name.startswith("extension/node_modules/@vscode/vsce") for name in names)  # a dev tool only


def test_settings_are_what_the_server_reads(manifest: dict):
    properties = manifest["contributes"]["configuration"]["properties"]
    assert set(properties) == SETTINGS
    # every default leaves the project's configuration in force
    defaults = {key.removeprefix("trainlint."): spec["default"] for key, spec in properties.items()}
    assert defaults["path"] == "trainlint"
    assert parse_options({**defaults, "configPath": defaults["configPath"] or None}, ROOT) == EditorOptions(ignore=())


def activate(vsix: Path, work: Path, manifest: dict, **settings: object) -> dict:
    """What the packaged extension asks of its language client, activated with these settings."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    with zipfile.ZipFile(vsix) as archive:
        archive.extractall(work)
    properties = manifest["contributes"]["configuration"]["properties"]
    answered = {key.removeprefix("trainlint."): spec["default"] for key, spec in properties.items()} | settings
    done = subprocess.run(
        [node, str(ACTIVATE), str(work / "extension"), json.dumps(answered), str(work / "workspace")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_activation_starts_trainlint_lsp_with_the_settings(vsix: Path, manifest: dict, tmp_path: Path):
    shown = activate(vsix, tmp_path, manifest)
    assert shown["bundled"] == os.path.join("node_modules", "vscode-languageclient", "node.js")
    (client,) = shown["clients"]
    assert client["serverOptions"] == {"command": "trainlint", "args": ["lsp"]}
    options = client["clientOptions"]
    assert {"scheme": "file", "language": "python"} in options["documentSelector"]
    assert {"notebook": "jupyter-notebook", "language": "python"} in options["documentSelector"]
    assert options["synchronize"] == {"configurationSection": "trainlint"}
    assert parse_options(options["initializationOptions"], tmp_path) == EditorOptions(ignore=())  # ignores nothing more


def test_settings_reach_the_server(vsix: Path, manifest: dict, tmp_path: Path):
    workspace = tmp_path / "workspace"
    (workspace / "ci").mkdir(parents=True)
    (workspace / "ci" / "pyproject.toml").write_text("[tool.trainlint]\n")
    shown = activate(
        vsix, tmp_path, manifest,
        path=".venv/bin/trainlint", select=["TL3"], ignore=["TL401"], preview=True, configPath="ci/pyproject.toml",
    )
    (client,) = shown["clients"]
    assert client["serverOptions"]["command"] == str(workspace / ".venv" / "bin" / "trainlint")
    sent = client["clientOptions"]["initializationOptions"]
    assert sent == {"select": ["TL3"], "ignore": ["TL401"], "preview": True, "configPath": "ci/pyproject.toml"}
    assert parse_options(sent, workspace) == EditorOptions(("TL3",), ("TL401",), workspace / "ci" / "pyproject.toml", True)
