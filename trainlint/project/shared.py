"""The projects one process analyses: one `Project` per root, shared by every file the process lints,
so that each module is outlined and summarised once; forgotten when a worker moves on to another
project (workers.py), so that a run over many projects holds one project's knowledge at a time."""

from __future__ import annotations

from pathlib import Path

from trainlint.project import roots as import_roots
from trainlint.project.constructions import forget_constructions
from trainlint.project.hierarchy import forget_hierarchy
from trainlint.project.index import Project, forget_outlines
from trainlint.project.kept_models import forget_models
from trainlint.project.python_trees import python_tree

_SHARED: dict[Path | None, Project] = {}


def shared(root: Path | None = None) -> Project:
    """One project per process and root, so that each imported module is summarised once."""
    key = root.resolve() if root is not None else None
    project = _SHARED.get(key)
    if project is None:
        project = _SHARED[key] = Project(root)
    return project


def forget_projects() -> None:
    """Forget every project this process has read: its import roots, outlines, summaries and parse
    trees; what the next file asks is read again."""
    from trainlint.model.parse import forget_trees  # (libcst: loaded only where files are analysed)

    _SHARED.clear()
    forget_outlines()
    import_roots.forget(recheck=False)
    forget_hierarchy()
    forget_constructions()
    python_tree.cache_clear()
    forget_trees()
    forget_models()
