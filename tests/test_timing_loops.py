"""A loop that times the forward and backward passes of a model and updates no weight is a benchmark,
not a training step (a model zoo's `compute_time_train`, a `--debug` loop calling `measure_fp_bp_time`):
its `torch.cuda.synchronize()` is the measurement. A loop that times its passes and steps an optimizer
trains, and pays for the synchronize on every step."""

from __future__ import annotations

from tests.helpers import lines

BENCHMARK = """
import time

import torch


def compute_time_train(model, loss_fun, inputs, labels):
    model.train()
    scaler = torch.cuda.amp.GradScaler()
    fw, bw = 0.0, 0.0
    for cur_iter in range(100):
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fun(model(inputs), labels)
        torch.cuda.synchronize()
        fw += time.perf_counter() - start
        start = time.perf_counter()
        scaler.scale(loss).backward()
        torch.cuda.synchronize()
        bw += time.perf_counter() - start
    return fw / 100, bw / 100
"""

# the timing in a helper that the counted loop calls, as Attention-Gated-Networks' debug benchmark has it
HELPER = """
import time

import torch


def measure_fp_bp_time(model, x, y):
    torch.cuda.synchronize()
    t0 = time.time()
    y_pred = model(x).sum()
    torch.cuda.synchronize()
    elapsed_fp = time.time() - t0
    t0 = time.time()
    y_pred.backward()
    torch.cuda.synchronize()
    return elapsed_fp, time.time() - t0


def benchmark_fp_bp_time(model, x, y, n_trial=1000):
    model.cuda()
    for i in range(n_trial):
        time_fp, time_bp = measure_fp_bp_time(model, x, y)
"""


def test_a_loop_timing_forward_and_backward_without_updates_is_no_step() -> None:
    assert lines(BENCHMARK, "TL402") == []
    assert lines(BENCHMARK, "TL202") == []  # (no weights move: no fp16 training to clip)
    assert lines(HELPER, "TL402") == []


def test_a_timed_loop_that_steps_an_optimizer_trains() -> None:
    training = BENCHMARK.replace("def compute_time_train(model, loss_fun, inputs, labels):", "def compute_time_train(model, loss_fun, inputs, labels, optimizer):")
    training = training.replace("        bw += time.perf_counter() - start\n", "        bw += time.perf_counter() - start\n        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad()\n")
    assert lines(training, "TL402") == [15, 19]


def test_a_backward_only_loop_without_a_clock_still_trains() -> None:
    # weights updated nowhere visible (a library's per-parameter hooks step them): the loop trains
    untimed = BENCHMARK.replace("        start = time.perf_counter()\n", "").replace("        fw += time.perf_counter() - start\n", "").replace("        bw += time.perf_counter() - start\n", "")
    assert lines(untimed, "TL402") == [14, 16]
