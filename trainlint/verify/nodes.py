"""A `verify run` over several nodes: torchrun's multi-node options (given, or read from SLURM's
environment under `srun`), the folder every node's ranks write their reports to, and the wait of the
first node for the whole job's reports. No torch here.

Each node runs `trainlint verify run` once (as it would run torchrun once); each launches torchrun
with the rendezvous options, its ranks write their reports to the shared gather folder, and the node
of `--node-rank 0` merges every rank's report into the job's one report. The other nodes report on
their own ranks and say where the job's report is.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

DEFAULT_PORT = 29400  # torchrun's default rendezvous port


class NodesError(ValueError):
    """Multi-node options that cannot start a run (said to the user as they are)."""


@dataclass(frozen=True)
class Nodes:
    """Where this node stands in a multi-node job."""

    count: int
    rank: int
    backend: str
    endpoint: str
    run_id: str
    gather: Path  # shared by every node: the ranks' reports

    def launcher_options(self) -> list[str]:
        """torchrun's options for this node (instead of `--standalone`)."""
        return [
            f"--nnodes={self.count}", f"--node-rank={self.rank}", f"--rdzv-backend={self.backend}",
            f"--rdzv-endpoint={self.endpoint}", f"--rdzv-id={self.run_id}",
        ]


def resolve(
    count: int | None, rank: int | None, backend: str | None, endpoint: str | None, run_id: str | None, gather: Path | None,
    environ: Mapping[str, str] = os.environ,
) -> Nodes | None:
    """The job's nodes from the options, with SLURM's environment (`srun`) filling what is not given;
    None for a run on one node."""
    slurm = "SLURM_JOB_ID" in environ and "SLURM_NNODES" in environ
    if count is None:
        count = int(environ["SLURM_NNODES"]) if slurm else 1
    if count <= 1:
        return None
    if rank is None:
        if not slurm or "SLURM_NODEID" not in environ:
            raise NodesError("--nnodes > 1 needs --node-rank (or SLURM's SLURM_NODEID under srun)")
        rank = int(environ["SLURM_NODEID"])
    if not 0 <= rank < count:
        raise NodesError(f"--node-rank {rank} is outside 0..{count - 1}")
    if endpoint is None:
        host = environ.get("MASTER_ADDR") or (first_host(environ["SLURM_JOB_NODELIST"]) if slurm and environ.get("SLURM_JOB_NODELIST") else None)
        if host is None:
            raise NodesError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (or MASTER_ADDR, or SLURM_JOB_NODELIST under srun)")
        endpoint = f"{host}:{environ.get('MASTER_PORT', DEFAULT_PORT)}"
    run_id = run_id or (environ["SLURM_JOB_ID"] if slurm else "trainlint")
    gather = (gather or Path(f".trainlint-verify-{run_id}")).resolve()
    return Nodes(count, rank, backend or "c10d", endpoint, run_id, gather)


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "gpu[03-05,09],cpu1" -> "gpu03"."""
    first = re.split(r",(?![^\[]*\])", nodelist.strip())[0]
    match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", first)
    if not match:
        return first
    prefix, ranges, suffix = match.groups()
    return f"{prefix}{ranges.split(',')[0].split('-')[0]}{suffix}"


CLOCK_SLACK_S = 2.0  # between this node's clock and the shared folder's timestamps


def wait_for_reports(folder: Path, ranks: int, deadline: float, since: float, poll: float = 0.5) -> list[Path | None]:
    """The report of each of `ranks` ranks in `folder` (`report.json.rank<N>`) written since `since`
    (time.time(): this job's, not a previous job's left in the folder), waiting for those not there
    yet until `deadline` (time.monotonic()); None for a rank that never reported."""
    while True:
        paths = [_fresh(folder / f"report.json.rank{rank}", since) for rank in range(ranks)]
        if all(paths) or time.monotonic() >= deadline:
            return paths
        time.sleep(poll)


def _fresh(path: Path, since: float) -> Path | None:
    try:
        return path if path.stat().st_mtime >= since - CLOCK_SLACK_S else None
    except OSError:
        return None
