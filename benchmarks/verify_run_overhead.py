"""What `trainlint verify run` costs a training step: the median step time of a script run plainly and
under the instruments, and the start-up of the instrumented run.

    python benchmarks/verify_run_overhead.py [--steps N] [--device cpu|cuda] [--size WIDTH]

The script trains an MLP of WIDTH x WIDTH layers with one CPU thread in both runs; it times its own
steps, so the plain figure has no instrument in it. The instrumented figure is the report's median step time (our own scans excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = """\
import statistics, sys, time
import torch
steps, device, width = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(6)], torch.nn.Linear(width, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, width, device=device), torch.randn(64, 1, device=device)
times = []
for step in range(steps):
    start = time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
print("MEDIAN", statistics.median(times[1:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "mlp.py"
        script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
        script_args = [str(args.steps + 10), args.device, str(args.size)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what the instrumented run uses on the CPU
        plain = subprocess.run([sys.executable, str(script), *script_args], capture_output=True, text=True, check=True, env=env)
        plain_median = float(plain.stdout.split("MEDIAN")[1])
        start = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--steps", str(args.steps),
             "--device", args.device, "--format", "json", "--", *script_args],
            capture_output=True, text=True, env=env,
        )
        wall = time.perf_counter() - start
    report = json.loads(run.stdout)
    instrumented = report["step_time"]["median_rest_s"]
    print(f"device {report['device']}, MLP width {args.size}, {report['steps']} steps")
    print(f"median step, plain:        {plain_median * 1e3:8.2f} ms")
    print(f"median step, instrumented: {instrumented * 1e3:8.2f} ms  ({instrumented / plain_median:.2f}x)")
    print(f"whole `verify run`:        {wall:8.2f} s (instruments' own time: {report['duration_s']:.2f} s)")
    memory = report.get("instrument_memory") or {}
    if memory.get("parameter_bytes"):
        kept = memory["snapshot_bytes"] + memory["mask_bytes"]
        print(f"extra memory of the checks: {kept / 2**20:.1f} MiB = {kept / memory['parameter_bytes']:.2f}x the trained parameters "
              f"(host snapshot {memory['snapshot_bytes'] / 2**20:.1f} MiB, gradient masks {memory['mask_bytes'] / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
