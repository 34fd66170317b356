"""Which file each worker of the pool gets next: files grouped by folder, folders by project, so
that the modules a project's files import are outlined and summarised by one worker rather than by
every worker, and a worker leaving a project leaves it for good (workers.py forgets it then)."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Collection

from trainlint.config import Settings

Task = tuple[int, str, Settings, bytes | None]  # index, name, settings, the bytes when already read


class FolderQueue:
    """The files still to analyse, grouped by folder in order, and the folders by unit (a project:
    `project_units`). A worker keeps to one folder while it has files, then to its unit while that has
    folders, so that the modules a unit's files import are outlined and summarised by one worker
    rather than by all; a worker whose unit is done starts a unit nobody has, else a folder nobody
    has, else helps with the largest folder left."""

    def __init__(self, tasks: list[Task], units: dict[str, str] | None = None) -> None:
        self.groups: dict[str, deque[Task]] = {}
        for task in tasks:
            self.groups.setdefault(os.path.dirname(task[1]), deque()).append(task)
        self.unit = units if units is not None else {}
        self.unclaimed: dict[str, deque[str]] = {}  # unit -> its folders nobody has started
        for folder in self.groups:
            self.unclaimed.setdefault(self.unit.get(folder, ""), deque()).append(folder)
        self.size = len(tasks)

    def __len__(self) -> int:
        return self.size

    def unit_of(self, folder: str) -> str:
        """The unit of `folder` ("" when the run has one folder, and for folders in no project)."""
        return self.unit.get(folder, "")

    def take(self, folder: str | None, busy: Collection[str] = ()) -> Task:
        """The next task of a worker whose last file was in `folder`; `busy`: the units other
        workers are in."""
        if folder not in self.groups:
            folder = self._next_folder(self.unit_of(folder) if folder is not None else None, busy)
        group = self.groups[folder]
        task = group.popleft()
        if not group:
            del self.groups[folder]
        self.size -= 1
        return task

    def _next_folder(self, unit: str | None, busy: Collection[str]) -> str:
        """A folder nobody has started, of `unit`, else of a unit no other worker is in, else of any;
        else the largest folder left."""
        units = [u for u in self.unclaimed if u == unit] or [u for u in self.unclaimed if u not in busy] or list(self.unclaimed)
        if not units:
            return max(self.groups, key=lambda f: len(self.groups[f]))
        folders = self.unclaimed[units[0]]
        folder = folders.popleft()
        if not folders:
            del self.unclaimed[units[0]]
        return folder


def project_units(folders: list[str]) -> dict[str, str]:
    """Each folder's unit of work: its project, the nearest folder above it holding a project marker
    ("" for a folder in none: the folders of a project without one are not told apart)."""
    from trainlint.project.roots import marker_root

    units: dict[str, str] = {}
    for folder in folders:
        marked = marker_root(Path(os.path.abspath(folder)))[0]
        units[folder] = str(marked) if marked is not None else ""
    return units
