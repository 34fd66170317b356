"""Loops that measure the passes, in a module that updates no weight, are no training steps: one that
times the forward and backward passes of a model (a model zoo's `compute_time_train`, a `--debug` loop
calling `measure_fp_bp_time`: its `torch.cuda.synchronize()` is the measurement), and a sweep over
settings written in the code calling a check that compares two implementations' gradients (a custom
operator's test script). A loop that times its passes and steps an optimizer trains, and pays for the
synchronize on every step; a loop over a loader that only backpropagates trains as before."""

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


# a custom operator's test script: each check builds leaf tensors, backpropagates through the reference
# and the CUDA version, and compares the gradients; `__main__` sweeps the channel counts
GRADIENT_CHECK = """
import torch


def reference(x, w):
    return (x.unsqueeze(-1) * w).sum(-1)


def check_backward_equal(channels):
    x0 = torch.rand(2, 4, channels).cuda()
    w0 = torch.rand(2, 4, channels, 3).cuda()
    x0.requires_grad = True
    reference(x0.double(), w0.double()).sum().backward()
    x1 = x0.detach()
    x1.requires_grad = True
    reference(x1, w0).sum().backward()
    ok = torch.allclose(x0.grad, x1.grad, rtol=1e-2, atol=1e-3)
    print(f"{ok} max_abs_err {(x0.grad - x1.grad).abs().max():.2e}")


if __name__ == "__main__":
    for channels in [1, 16, 30, 1025]:
        check_backward_equal(channels)
"""


def test_a_sweep_of_written_settings_through_a_gradient_check_is_no_step() -> None:
    assert lines(GRADIENT_CHECK, "TL401") == []
    assert lines(GRADIENT_CHECK, "TL406") == []


def test_the_same_check_over_a_loader_trains() -> None:
    # near miss: a loop drawing batches that only backpropagates (a library steps the weights) trains
    looped = GRADIENT_CHECK.replace("for channels in [1, 16, 30, 1025]:", "for channels in loader:")
    assert lines(looped, "TL401") == [17, 18]


def test_a_loop_over_variables_is_no_sweep() -> None:
    # near miss: `for loss in [loss_a, loss_b]:` lists values, not settings; backpropagating each trains
    over_values = GRADIENT_CHECK.replace("    for channels in [1, 16, 30, 1025]:\n        check_backward_equal(channels)\n", "    a, b = 1, 16\n    for channels in [a, b]:\n        check_backward_equal(channels)\n")
    assert lines(over_values, "TL401") == [17, 18]
