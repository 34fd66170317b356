"""`trainlint verify run --nproc-per-node 2`: a data-parallel script under torchrun on the CPU (gloo),
the instruments in both ranks and their evidence merged; a rank that dies ends the run cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import process_alive, messages

pytest.importorskip("torch")
distributed = pytest.importorskip("torch.distributed")
if not distributed.is_available() or not distributed.is_gloo_available():
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "scripts" / "ddp_style.py"


def verify_run(*script_args: str, steps: int = 6, output: str = "json", timeout: int = 600) -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(SCRIPT), "--nproc-per-node", "2", "--steps", str(steps),
         "--device", "cpu", "--format", output, "--timeout", str(timeout), "--", *script_args],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, (json.loads(done.stdout) if output == "json" else done.stdout), done.stderr


def test_ddp_ranks_agree_and_count_their_gradient_all_reduces():
    code, text, stderr = verify_run(output="text")
    assert code == 0, stderr[-3000:]
    assert "Ranks (2 processes under torchrun" in text
    assert "parameters agree across ranks 0, 1 after each of 6 steps" in text
    assert "gradients agree across ranks 0, 1 as each of 6 steps applies them" in text
    for rank in (0, 1):
        assert f"rank {rank}: 6 steps, stopped after 6 optimizer steps" in text
    assert text.count("collectives per step: all_reduce (DDP gradient bucket) 1") == 2
    assert "No training-health problem in this run." in text


def test_ranks_trained_apart_diverge():
    # the DDP wrapper forgotten: each rank steps on its own shard of the data
    code, report, _ = verify_run("--wrap", "none")
    assert report["world_size"] == 2 and report["steps"] == 6
    assert report["rank_agreement"] == {"status": "diverge", "first_step": 1, "ranks": [1], "reference_rank": 0, "steps_compared": 6}
    assert any(p.startswith("the ranks diverge") for p in messages(report))
    # no DDP wrapper: gradients differ, as they must; that is not a failure to average them
    assert report["gradient_agreement"]["status"] == "diverge" and "TLR602" not in [p["code"] for p in report["problems"]]
    assert code == 1


def test_gradients_that_ddp_does_not_average_are_named_with_the_move_after_wrapping():
    code, report, _ = verify_run("--wrap", "ddp-then-double")
    assert report["gradient_agreement"] == {"status": "diverge", "first_step": 1, "ranks": [1], "reference_rank": 0, "steps_compared": 6}
    problems = {p["code"]: p for p in report["problems"]}
    assert code == 1 and set(problems) == {"TLR601", "TLR602"}
    assert problems["TLR602"]["line"] == 44 and problems["TLR602"]["path"] == str(SCRIPT)
    assert "the wrapped model was moved (device or dtype) at " in problems["TLR602"]["message"]
    assert "(`self.model.module.double()`) after DistributedDataParallel wrapped it at " in problems["TLR602"]["message"]
    assert problems["TLR601"]["message"].endswith("(their gradients were not averaged: TLR602)")


def test_fsdp_shards_are_not_compared_and_its_collectives_are_counted():
    code, report, stderr = verify_run("--wrap", "fsdp")
    assert code == 0, stderr[-3000:]
    assert report["rank_agreement"]["status"] == "sharded"
    kinds = {c["kind"]: c["per_step"] for c in report["ranks"][0]["collectives"]}
    # FSDP gathers and reduce-scatters through the `_single` collectives or the `_tensor` ones, by torch version
    assert max(kinds.get("all_gather_single", 0), kinds.get("all_gather_into_tensor", 0)) > 0
    assert max(kinds.get("reduce_scatter_single", 0), kinds.get("reduce_scatter_tensor", 0)) > 0


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_a_killed_rank_ends_the_run_with_a_clear_report_and_no_orphans(tmp_path: Path):
    code, report, stderr = verify_run("--die-rank", "1", "--die-step", "3", "--pid-dir", str(tmp_path), steps=20)
    assert code == 2
    assert report["stopped"] == "rank-failed" and report["message"] == "rank 1 died; the other ranks' evidence is kept"
    assert report["error"].startswith("rank 1 ended without writing its report")
    rank0, rank1 = report["ranks"]
    assert rank0["reported"] and rank0["steps"] == 3 and not rank1["reported"]
    assert "trainlint: a rank failed: rank 1 ended without writing its report" in stderr
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 4 and not any(process_alive(pid) for pid in pids)  # the ranks and their helpers


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_a_hung_rank_ends_the_run_at_the_timeout_with_a_clear_report(tmp_path: Path):
    code, report, stderr = verify_run("--hang-rank", "1", "--die-step", "3", "--pid-dir", str(tmp_path), steps=20, timeout=10)
    assert code == 2
    assert report["stopped"] == "rank-failed" and report["steps"] == 3
    assert "stopped by the timeout (stopped by the 10 s timeout after 3 optimizer steps): a rank hangs" in report["error"]
    assert "trainlint: a rank failed: rank" in stderr
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 4 and not any(process_alive(pid) for pid in pids)  # the ranks and their helpers


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_joined_by_a_c10d_rendezvous_give_one_report_naming_both_nodes_ranks(tmp_path: Path):
    # two `verify run` invocations on one machine, as two nodes would each run one
    port, gather = _free_port(), tmp_path / "shared"

    def node(rank: int) -> list[str]:
        return [sys.executable, "-m", "trainlint", "verify", "run", str(SCRIPT), "--nnodes", "2", "--node-rank", str(rank),
                "--nproc-per-node", "1", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", "--gather-dir", str(gather),
                "--steps", "6", "--device", "cpu", "--format", "json"]

    other = subprocess.Popen(node(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = subprocess.run(node(0), capture_output=True, text=True, timeout=300)
    out, _ = other.communicate(timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads(first.stdout)
    assert report["world_size"] == 2 and report["nodes"] == {"count": 2, "gather": str(gather), "run_id": "two-nodes"}
    assert sorted(r["node"] for r in report["ranks"]) == [0, 1] and all(r["steps"] == 6 for r in report["ranks"])
    assert report["rank_agreement"]["status"] == "agree" and report["gradient_agreement"]["status"] == "agree"
    assert report["problems"] == []
    # the other node reports on its own rank and says where the job's report is
    own = json.loads(out)
    assert other.returncode == 0 and [r["node"] for r in own["ranks"]] == [1]
    assert own["message"].startswith("node 1: stopped after 6 optimizer steps; node 0 reports the whole job")


def test_slurm_s_environment_places_the_node_in_the_job(tmp_path: Path):
    from trainlint.verify.nodes import NodesError, first_host, resolve

    env = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[07-10],cpu1"}
    nodes = resolve(None, None, None, None, None, tmp_path, environ=env)
    assert nodes is not None and (nodes.count, nodes.rank, nodes.endpoint, nodes.run_id, nodes.backend) == (4, 2, "gpu07:29400", "4242", "c10d")
    assert nodes.launcher_options() == ["--nnodes=4", "--node-rank=2", "--rdzv-backend=c10d", "--rdzv-endpoint=gpu07:29400", "--rdzv-id=4242"]
    assert resolve(None, None, None, None, None, None, environ={**env, "MASTER_ADDR": "head", "MASTER_PORT": "1234"}).endpoint == "head:1234"
    assert resolve(2, 1, "static", "h:1", "x", tmp_path, environ={}).launcher_options()[2] == "--rdzv-backend=static"
    assert resolve(None, None, None, None, None, None, environ={}) is None  # one node
    assert first_host("node1") == "node1" and first_host("a[3,5-6]b") == "a3b"
    with pytest.raises(NodesError, match="needs --node-rank"):
        resolve(2, None, None, "h:1", None, None, environ={})
