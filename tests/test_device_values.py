"""Values that become device tensors, and values that never were: a host counter that accumulates a
device reduction, the elements of a device tensor iterated, a custom autograd function's `forward`
and `backward` reached through `Fn.apply`, tensors built on the host from numbers, and a GradScaler
made by a project factory. Each with a near miss that stays silent."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import lint, lint_project as _lint_project


def lint_project(tmp_path: Path, files: dict[str, str], select: str) -> list[str]:
    return _lint_project(tmp_path, files, select, preview=True)


def found(code: str, rule: str, name: str = "train.py") -> list[int]:
    return [d.line for d in lint(textwrap.dedent(code), rule, name=name) if d.code == rule]


# -- 1. a host counter that accumulates a device reduction is a device tensor afterwards ------------
TOKEN_BUDGET = """
import torch
import torch.nn.functional as F


class Trainer:
    def __init__(self, model, optimizer, max_tokens, device):
        self.model = model
        self.optimizer = optimizer
        self.max_tokens = max_tokens
        self.device = device
        self.tokens = 0
        self.samples = 0

    def train_step(self, step, batch):
        x, y = batch["input_ids"].to(self.device), batch["labels"].to(self.device)
        loss = F.cross_entropy(self.model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        {count}
        return {test}

    def fit(self, loader):
        for step, batch in enumerate(loader):
            if not self.train_step(step, batch):
                break
"""


def test_a_counter_accumulating_a_reduction_of_a_moved_batch_is_tested_on_the_device() -> None:
    code = TOKEN_BUDGET.format(count="self.tokens += (y >= 0).sum()", test="self.tokens < self.max_tokens")
    # (a `return` of the comparison is no read: the caller's `if not ...` is)
    code = code.replace("        return self.tokens < self.max_tokens", "        if self.tokens < self.max_tokens:\n            return True\n        return False")
    assert found(code, "TL401") == [22]


def test_a_counter_of_numbers_read_at_a_gate_or_counted_with_len_stays_on_the_host() -> None:
    gated = "if step % 100 == 0:\n            self.tokens += (y >= 0).sum().item()"
    for count in (gated, "self.samples += len(y)"):
        code = TOKEN_BUDGET.format(count=count, test="True")
        code = code.replace("        return True", "        if self.samples < self.max_tokens and self.tokens < self.max_tokens:\n            return True\n        return False")
        assert found(code, "TL401") == [], count


def test_a_host_tensor_counter_stays_on_the_host_when_a_device_count_is_added() -> None:
    # torch adds the device result into the host tensor in place: the counter stays where it is
    code = TOKEN_BUDGET.format(count="self.tokens += (y >= 0).sum()", test="True")
    code = code.replace("self.tokens = 0", "self.tokens = torch.zeros((), dtype=torch.long)")
    code = code.replace("        return True", "        if self.tokens < self.max_tokens:\n            return True\n        return False")
    assert found(code, "TL401") == []


# -- 2. iterating a device tensor yields device tensors --------------------------------------------
TIMESTEP_BINS = """
import torch
import torch.nn.functional as F

loss_by_t = [0.0] * 10
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    t_batch = torch.rand(x.shape[0], device="cuda")
    losses = F.mse_loss(model(x, t_batch), y, reduction="none").mean(dim=1)
    losses.mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    {pairs}
    for t, l in {iterated}:
        loss_by_t[int(t * 10)] += l
"""


def test_elements_of_zipped_device_tensors_are_read_one_by_one() -> None:
    code = TIMESTEP_BINS.format(pairs="pass", iterated="zip(t_batch, losses.detach())")
    assert found(code, "TL401") == [15]  # one finding for the statement, not one per element


def test_iterating_the_host_list_of_one_copy_reads_only_at_the_copy() -> None:
    code = TIMESTEP_BINS.format(pairs="pairs = torch.stack([t_batch, losses.detach()], 1).tolist()", iterated="pairs")
    assert found(code, "TL401") == [13]


def test_enumerating_a_device_tensor_gives_numbers_and_rows() -> None:
    code = TIMESTEP_BINS.format(pairs="pass", iterated="enumerate(losses.detach())")
    code = code.replace("loss_by_t[int(t * 10)] += l", "loss_by_t[t % 10] += float(l)")
    assert found(code, "TL401") == [15]
    assert found(code.replace("float(l)", "l"), "TL401") == []


CAPTION_LENGTHS = """
import torch

def train(model, loader, optimizer, device, pad):
    for images, captions in loader:
        images, captions = images.to(device), captions.to(device)
        loss = model(images, captions)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        words = 0
        for caption in {captions}:
            for token in caption:
                if int(token) != pad:
                    words += 1
"""


def test_rows_of_a_batch_moved_to_the_device_are_read_one_by_one() -> None:
    # Show, Attend and Tell's caption lengths: each token of the caption batch on the device, turned into an int
    assert found(CAPTION_LENGTHS.format(captions="captions"), "TL401") == [14]


def test_rows_of_the_batch_copied_back_once_are_host_numbers() -> None:
    assert found(CAPTION_LENGTHS.format(captions="captions.cpu()"), "TL401") == [12]


def test_the_keys_of_a_batch_object_moved_to_the_device_are_strings() -> None:
    # an HF BatchEncoding moved whole: iterating it gives its keys
    code = """
    import torch

    def train(model, loader, optimizer, device):
        for batch in loader:
            batch = batch.to(device)
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            for key in batch:
                if key == "labels":
                    print(key)
    """
    assert found(code, "TL401") == []


# -- 3. a custom autograd function applied in a module's forward runs every step --------------------
BUCKETIZE = """
import torch
import torch.nn as nn


class Bucketize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, boundaries):
        edges = boundaries.tolist()
        return torch.bucketize(x, torch.tensor(edges, device=x.device)).float()

    @staticmethod
    def backward(ctx, grad):
        scale = grad.abs().max().cpu()
        return grad / scale, None
"""

BUCKETIZE_NET = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.register_buffer("boundaries", torch.linspace(-1, 1, 8))

    def forward(self, x):
        return self.proj(Bucketize.apply(x, self.boundaries))


model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""

BUCKETIZE_EVAL = """
def evaluate(model, loader, boundaries):
    hits = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            hits += (Bucketize.apply(model(x), boundaries) == y).float().mean()
    return hits / len(loader)


model = nn.Linear(16, 16).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(evaluate(model, val_loader, torch.linspace(-1, 1, 8).cuda()))
"""


def test_an_autograd_function_applied_in_forward_reads_the_host_every_step() -> None:
    assert found(BUCKETIZE + BUCKETIZE_NET, "TL401") == [9, 14]  # forward's `.tolist()`, backward's `.cpu()`


def test_an_autograd_function_used_only_in_evaluation_is_not_per_step() -> None:
    assert found(BUCKETIZE + BUCKETIZE_EVAL, "TL401") == []


def test_an_autograd_function_of_another_module_applied_every_step(tmp_path: Path) -> None:
    files = {"ops.py": BUCKETIZE, "train.py": "import torch\nimport torch.nn as nn\n\nfrom ops import Bucketize\n" + BUCKETIZE_NET}
    assert lint_project(tmp_path, files, "TL401") == ["ops.py:14:TL401", "ops.py:9:TL401"]  # (sorted as text)


# -- 4. tensors built on the host from numbers, never moved ----------------------------------------
AUGMENT = """
import random

import torch


def random_shift(img, max_shift):
    pad = torch.Tensor([random.randint(0, max_shift), random.randint(0, max_shift)])
    pad = pad * 2 + 1
    shift = int(torch.tensor(pad).sum().item()) + {extra}
    return torch.roll(img, shifts=(shift, int(pad[0].item())), dims=(-2, -1))


for x, y in loader:
    x = random_shift(x, 4)
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_tensors_built_on_the_host_from_numbers_are_read_without_a_sync() -> None:
    assert found(AUGMENT.format(extra="0"), "TL401") == []


def test_tensors_built_on_the_device_or_moved_there_are_read_with_a_sync() -> None:
    assert found(AUGMENT.format(extra='torch.tensor(max_shift, device="cuda").item()'), "TL401") == [10]
    assert found(AUGMENT.format(extra="torch.tensor(pad).to(img.device).sum().item()"), "TL401") == [10]


# -- 5. a GradScaler made by a project factory -----------------------------------------------------
def init_opt(scaler: str) -> str:
    return f"""
import torch


def init_opt(model, lr, use_amp=True):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = {scaler}
    return model, optimizer, scaler
"""


def train(precision: str, clip: str = "") -> str:
    return f"""
import torch

from setup_opt import init_opt

model, optimizer, scaler = init_opt(Net().cuda(), 1e-3, use_amp=args.amp)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    with torch.autocast("cuda", dtype={precision}):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    {clip or "pass"}
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""


CLIP_SCALED = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
CLIP_UNSCALED = "scaler.unscale_(optimizer); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"


def test_a_scaler_from_a_factory_is_a_grad_scaler_at_the_caller(tmp_path: Path) -> None:
    factory = init_opt("torch.cuda.amp.GradScaler()")
    found = lint_project(tmp_path, {"setup_opt.py": factory, "train.py": train("torch.bfloat16")}, "TL103,TL202")
    assert found == ["train.py:6:TL103", "train.py:6:TL202"]
    found = lint_project(tmp_path, {"setup_opt.py": factory, "train.py": train("torch.float16", CLIP_SCALED)}, "TL201,TL202")
    assert found == ["train.py:12:TL201"]
    assert lint_project(tmp_path, {"setup_opt.py": factory, "train.py": train("torch.float16", CLIP_UNSCALED)}, "TL103,TL201,TL202") == []
    spelled = train("torch.bfloat16").replace("from setup_opt import init_opt", "import setup_opt").replace("= init_opt(", "= setup_opt.init_opt(")
    assert lint_project(tmp_path, {"setup_opt.py": factory, "train.py": spelled}, "TL103") == ["train.py:6:TL103"]


def test_a_factory_scaler_that_may_be_none_scales_only_when_asked(tmp_path: Path) -> None:
    # like `GradScaler(enabled=use_amp)`: the bf16 rule leaves the caller's choice alone; an fp16 run
    # that asks for it still needs clipping
    factory = init_opt("torch.cuda.amp.GradScaler() if use_amp else None")
    assert lint_project(tmp_path, {"setup_opt.py": factory, "train.py": train("torch.bfloat16")}, "TL103") == []
    assert lint_project(tmp_path, {"setup_opt.py": factory, "train.py": train("torch.float16")}, "TL202") == ["train.py:6:TL202"]


def test_the_keys_of_a_dict_of_device_tensors_are_no_tensors() -> None:
    # improved-diffusion's `log_loss_dict`: the losses are read once per entry, the keys never. The
    # mean (6) is the helper's own value; the copies of line 7 copy what the step passes as it came
    # (`ts`, the entries of `losses`): one finding, at the call that passes them (16)
    code = """
    import torch

    def log_loss_dict(ts, losses):
        for key, values in losses.items():
            logger.logkv_mean(key, values.mean().item())
            for sub_t, sub_loss in zip(ts.cpu().numpy(), values.detach().cpu().numpy()):
                logger.logkv_mean(f"{key}_q{int(4 * sub_t)}", sub_loss)

    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        t = torch.randint(0, 1000, (x.shape[0],), device="cuda")
        losses = {"mse": torch.nn.functional.mse_loss(model(x, t), y, reduction="none").mean(dim=1)}
        losses["mse"].mean().backward()
        optimizer.step()
        log_loss_dict(t, losses)
    """
    assert found(code, "TL401") == [6, 16]


def test_batches_drawn_from_a_list_of_host_tensors_are_data_not_built_every_step() -> None:
    # moving the batch is inherent: the tensors were built once, before the loop
    code = """
    import torch

    def fit(model, optimizer, batches, device):
        for step, (x, y) in enumerate(batches):
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    fit(model, optimizer, [(torch.randn(4, 16), torch.randn(4, 16)) for _ in range(20)], "cuda")
    """
    assert found(code, "TL406") == []


def test_a_cast_to_the_default_dtype_moves_nothing() -> None:
    # `.to(torch.get_default_dtype())` converts where the table is; `.cuda()` of it at the call moves it
    code = """
    import math
    import torch

    def get_embedding(num_embeddings, embedding_dim):
        emb = torch.exp(torch.arange(embedding_dim // 2).float() * -math.log(10000))
        emb = torch.arange(num_embeddings).float().unsqueeze(1) * emb.unsqueeze(0)
        return emb.to(torch.get_default_dtype())

    def train(model, loader, optimizer):
        model.cuda()
        for x in loader:
            loss = model(x.cuda(), get_embedding(64, 32).cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert found(code, "TL406") == [13]


# -- a buffer moves with its module; a plain tensor attribute stays where it was built -------------
ANNEALED = """
import torch
import torch.nn as nn


class Algorithm(nn.Module):
    def __init__(self, net, anneal_iters):
        super().__init__()
        self.net = net
        self.anneal_iters = anneal_iters
        self.optimizer = torch.optim.Adam(self.net.parameters())
        {counter}

    def update(self, x, y, step):
        weight = 10.0 if {test} else 1.0
        loss = ((self.net(x) - y) ** 2).mean() * weight
        if {test}:
            self.optimizer = torch.optim.Adam(self.net.parameters())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.update_count += 1


def main(loader):
    algorithm = Algorithm(nn.Linear(4, 1), 100)
    algorithm.to("cuda")
    for step, (x, y) in enumerate(loader):
        algorithm.update(x.to("cuda"), y.to("cuda"), step)
"""
BUFFER = 'self.register_buffer("update_count", torch.tensor([0]))'


def test_a_buffer_counter_tested_every_step_is_read_on_the_device() -> None:
    # (the conditional expression's test is read as the `if`'s is)
    assert found(ANNEALED.format(counter=BUFFER, test="self.update_count >= self.anneal_iters"), "TL401") == [15, 17]


def test_a_tensor_attribute_that_is_no_buffer_or_a_buffer_tested_at_a_gate_is_not() -> None:
    plain = ANNEALED.format(counter="self.update_count = torch.tensor([0])", test="self.update_count >= self.anneal_iters")
    assert found(plain, "TL401") == []  # `.to()` moves parameters and buffers, not other attributes
    gated = ANNEALED.format(counter=BUFFER, test="step % 100 == 0 and self.update_count >= self.anneal_iters")
    assert found(gated, "TL401") == []
    on_the_cpu = ANNEALED.format(counter=BUFFER, test="self.update_count >= self.anneal_iters").replace('"cuda"', '"cpu"')
    assert found(on_the_cpu, "TL401") == []


# -- a `for` binds its target afresh on every round -------------------------------------------------
MOVED_IN_THE_LOOP = """
import torch


def train(model, loader, optimizer):
    model = model.cuda()
    {before}
    for x, mask in {batches}:
        {move}
        if mask.sum() > 3:
            x = x * mask
        keep = mask if 0 in mask else None
        loss = model(x, keep).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_a_loop_variable_moved_in_the_loop_is_a_device_tensor_there() -> None:
    # (`x = x.cuda()` read the previous round's binding, which the loop's header overwrites: nothing)
    for move in ("x, mask = x.cuda(), mask.cuda()", "mask = mask.cuda()", "mask = mask.to('cuda', non_blocking=True)"):
        code = MOVED_IN_THE_LOOP.format(before="", batches="loader", move=move)
        assert found(code, "TL401") == [10, 12], move  # (`0 in mask` reads `(mask == 0).any()`)


def test_a_value_bound_before_the_loop_does_not_reach_a_body_whose_header_rebinds_it() -> None:
    code = MOVED_IN_THE_LOOP.format(before="mask = torch.ones(3).cuda()", batches="host_batches", move="x = x.float()")
    assert found(code.replace("def train(model, loader, optimizer):", "def train(model, loader, optimizer):\n    host_batches = [(torch.ones(3), torch.ones(3)) for _ in range(4)]"), "TL401") == []


# -- a factory's tensor scaled by a factor of unknown kind is still built on the host --------------
EMBEDDING = """
import math

import torch


def timestep_embedding(timesteps, dim):
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -scale)
    freqs = freqs.to(device=timesteps.device)
    return timesteps[:, None] * freqs[None, :]


def train(model, loader, optimizer, dim):
    for x, t, labels in loader:
        x, t = x.cuda(), t.cuda()
        {count}
        loss = model(x, timestep_embedding(t, dim)).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_a_frequency_table_scaled_by_a_parameter_s_factor_is_built_on_the_host_every_step() -> None:
    assert found(EMBEDDING.format(count="pass"), "TL406") == [11]


def test_a_count_of_batch_data_added_to_a_host_tensor_carries_data() -> None:
    count = "tokens = torch.tensor(0)\n        tokens += (labels != -100).sum()\n        tokens = tokens.cuda()"
    assert found(EMBEDDING.format(count=count).replace("* -scale", "* -1.0"), "TL406") == [11]


# -- `.numpy()` with no copy before it: torch refuses a device tensor, so the tensor is on the host --
NUMPY_READS = """
    import numpy as np
    import torch

    def nms(dets):
        dets = dets.numpy()
        return np.argsort(dets[:, 4])

    def fit(model, loader, opt):
        for x, y in loader:
            out = model(x.cuda())
            keep = nms(out.detach())
            labels = y.float().numpy()
            loss = out.sum()
            loss.backward()
            opt.step()
            print(loss.detach().cpu().numpy())
            print(out.detach().numpy())
            print((out + 1).numpy().tolist())
"""


def test_numpy_of_a_tensor_not_copied_first_is_no_sync_but_the_copy_before_it_is() -> None:
    # faster-rcnn.pytorch's CPU NMS and deeplab's label resizing: `.numpy()` of a device tensor raises
    # (TypeError) instead of copying, so where it runs the tensor is on the host; `.cpu().numpy()`
    # copies, and its `.cpu()` is the sync
    assert found(NUMPY_READS, "TL401") == [17]


# -- host copies stay on the host: converted, indexed, iterated, combined -------------------------
# deepspeech's shape: the lengths are copied to the host once (`lengths.cpu().int()`), a conv stack
# module iterates them and reads each with `.item()`, which waits for nothing
LENGTHS = """
import torch
from torch import nn


class MaskConv(nn.Module):
    def __init__(self, seq):
        super().__init__()
        self.seq_module = seq

    def forward(self, x, lengths):
        for module in self.seq_module:
            x = module(x)
            for i, length in enumerate(lengths):
                n = length.item()
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = MaskConv(nn.Sequential(nn.Conv2d(1, 1, 3)))

    def forward(self, x, lengths):
        lengths = COPY
        x = self.conv(x, lengths[:, 0] * 2 - 1)
        return x


def train(loader):
    model = Net().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, l in loader:
        out = model(x.cuda(), l.cuda())
        opt.zero_grad()
        out.sum().backward()
        opt.step()
"""


def test_what_is_computed_from_a_host_copy_is_read_without_a_sync() -> None:
    # only the copy itself is reported; the elements of the converted, indexed and scaled copy are host values
    assert found(LENGTHS.replace("COPY", "lengths.cpu().int()"), "TL401") == [25]


def test_lengths_left_on_the_device_are_read_one_by_one() -> None:
    assert found(LENGTHS.replace("COPY", "lengths.int()"), "TL401") == [15]


def test_a_copy_made_on_one_path_only_leaves_the_device_value_on_the_other() -> None:
    # `if self.cpu: x = x.cpu()`: the caller's device tensor reaches the read when the flag is off
    code = LENGTHS.replace("        lengths = COPY\n", "        if x.shape[0] > 8:\n            lengths = lengths.cpu()\n")
    assert found(code, "TL401") == [15, 26]


# CenterNet's focal loss, in a module of its own: `if num_pos == 0:` tests a reduction of the target
# every caller moves to the device before passing it
FOCAL = {
    "losses.py": """
        import torch


        def neg_loss(pred, gt):
            pos_inds = gt.eq(1).float()
            num_pos = pos_inds.float().sum()
            pos_loss = (torch.log(pred) * pos_inds).sum()
            if num_pos == 0:
                return -pos_loss
            return -pos_loss / num_pos
    """,
    "train.py": """
        import torch
        from losses import neg_loss


        def train(model, loader):
            model = model.cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                loss = neg_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_a_helper_of_another_module_testing_what_callers_move_to_the_device_syncs(tmp_path: Path) -> None:
    assert lint_project(tmp_path, FOCAL, "TL401") == ["losses.py:9:TL401"]


def test_a_helper_of_another_module_given_host_or_unknown_values_stays_silent(tmp_path: Path) -> None:
    for passed in ("torch.zeros(8)", "y"):  # a host tensor; or a batch the analysis cannot place
        files = {**FOCAL, "train.py": FOCAL["train.py"].replace("neg_loss(model(x), y)", f"neg_loss(model(x), {passed})").replace("x, y = x.cuda(), y.cuda()", "x = x.cuda()")}
        assert lint_project(tmp_path, files, "TL401") == [], passed


# StyleTTS2's masks: a torch factory sized by a reduction of device lengths reads it on the host first
SIZED = """
import torch


def train(model, loader):
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, lengths in loader:
        x, lengths = x.cuda(), lengths.cuda()
        mask = torch.arange(SIZE, device=x.device) < lengths[:, None]
        loss = model(x, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_factory_sized_by_a_device_tensor_syncs() -> None:
    assert found(SIZED.replace("SIZE", "lengths.max()"), "TL401") == [10]
    assert found(SIZED.replace("SIZE", "end=lengths.max()"), "TL401") == [10]


def test_a_tensor_factory_method_sized_by_a_device_tensor_syncs() -> None:
    # a TTS loss's word durations: `dur.new_zeros([b, word_id.max() + 1])`, sized on the host
    sized = SIZED.replace("torch.arange(SIZE, device=x.device) < lengths[:, None]", "x.new_zeros([x.shape[0], SIZE])")
    assert found(sized.replace("SIZE", "lengths.max() + 1"), "TL401") == [10]
    assert found(sized.replace("SIZE", "x.shape[1] + 1"), "TL401") == []


def test_a_factory_sized_by_a_shape_or_a_host_value_does_not() -> None:
    for size in ("x.shape[1]", "x.size(1)", "512"):
        assert found(SIZED.replace("SIZE", size), "TL401") == [], size
    # a host copy's maximum: only the copy is a sync, reported once for the statement
    [finding] = [d for d in lint(textwrap.dedent(SIZED.replace("SIZE", "lengths.cpu().max()")), "TL401", name="train.py") if d.code == "TL401"]
    assert "lengths.cpu()" in finding.message and "whose size" not in finding.message


# -- a host tensor a branch builds anew on each round, then moved by rebinding its name -------------
NOISE_STEP = """
import random
import torch

model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
noise = {before}
for step, batch in enumerate(loader):
    {test}
        noise = torch.randn(batch.shape)
    noise = torch.autograd.Variable(noise.cuda())
    loss = (model(batch.cuda()) - noise).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_tensor_a_branch_builds_each_round_and_the_move_rebinds_is_copied_every_step() -> None:
    # DnCNN's shape: `if opt.mode == 'S': noise = torch.FloatTensor(...).normal_()`, then
    # `noise = Variable(noise.cuda())`; the previous round's device tensor reaches the move only on a
    # round where the branch did not run, and a test the loop never changes runs on every round or none
    for test in ("if opt.mode == 'S':", "if True:"):
        assert found(NOISE_STEP.format(before="None", test=test), "TL406") == [11]
    # a host tensor bound before the loop too: copied every step while the branch runs
    assert found(NOISE_STEP.format(before="torch.zeros(4)", test="if opt.mode == 'S':"), "TL406") == [11]


def test_a_tensor_a_varying_branch_builds_or_data_bound_before_the_loop_is_no_finding() -> None:
    # near misses: built on the first round only (then the move copies nothing), lazily, at random,
    # or the data bound before the loop on the rounds the branch skips
    for test in ("if step == 0:", "if noise is None:", "if random.random() < 0.5:"):
        assert found(NOISE_STEP.format(before="None", test=test), "TL406") == [], test
    assert found(NOISE_STEP.format(before="torch.load('noise.pt')", test="if opt.mode == 'S':"), "TL406") == []


LATENT = """
import torch


class Model:
    def __init__(self, net, opt, device):
        self.net, self.opt, self.device = net.to(device), opt, device

    def get_z_random(self, batch_size, nz, random_type="gauss"):
        if random_type == "uni":
            z = torch.rand(batch_size, nz) * 2.0 - 1.0
        elif random_type == "gauss":
            z = {gauss}
        return z.detach().to(self.device)

    def train_step(self, batch):
        loss = self.net(batch, self.get_z_random(batch.size(0), 8)).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


def main(loader, net, opt):
    model = Model(net, opt, torch.device("cuda"))
    for batch in loader:
        model.train_step(batch.cuda())
"""


def test_a_tensor_one_of_two_factories_builds_on_the_host_is_built_on_the_host() -> None:
    # BicycleGAN's latent code: `torch.rand(...) * 2 - 1` on one path, `torch.randn(...)` on the other
    assert found(LATENT.format(gauss="torch.randn(batch_size, nz)"), "TL406") == [14]


def test_a_tensor_a_factory_builds_on_one_path_and_data_gives_on_the_other_is_no_finding() -> None:
    # near miss: on the other path the latent code is the batch's own (data, moved as the batch is)
    assert found(LATENT.format(gauss="torch.tensor(self.codes[batch_size])"), "TL406") == []


BASE_RATES = """
import torch
from torch.autograd import Variable

model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
br = None
for x in loader:
    out = model(x.cuda())
    br = {value}
    loss = (out * br).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_host_tensor_built_and_moved_only_while_its_name_is_none_moves_once() -> None:
    # Outlier Exposure's base rates: `br = Variable(...).cuda() if br is None else br`, on the first step only
    assert found(BASE_RATES.format(value="Variable(torch.FloatTensor(rates)).cuda() if br is None else br"), "TL406") == []
    # near miss: a flag chooses the branch on every step, and the host tensor crosses each time
    assert found(BASE_RATES.format(value="torch.FloatTensor(rates).cuda() if use_rates else br"), "TL406") == [10]


NONE_TEST = """
import torch

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    out = model(x.cuda())
    loss = out.mean()
    aux = out.std()
    if aux != None:
        loss = loss + aux
    if loss > 10:
        print("diverging")
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_tensor_compared_with_none_is_no_read() -> None:
    # torch gives up on `t != None` and Python compares identities: a bool, no sync; comparing the
    # loss with a number still reads it
    assert found(NONE_TEST, "TL401") == [NONE_TEST.splitlines().index("    if loss > 10:") + 1]
    assert found(NONE_TEST.replace("aux != None", "aux == None"), "TL401") == [NONE_TEST.splitlines().index("    if loss > 10:") + 1]


EQUAL_TEST = """
import torch

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    out = model(x.cuda())
    same = torch.equal(out, y.cuda())
    if same:
        continue
    loss = out.mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_torch_equal_reads_at_the_call_and_gives_a_python_bool() -> None:
    # the translation tutorial's `self_attention = torch.equal(kv, q)`, then `if self_attention:`: the
    # read is the call; the `if` tests a bool
    at = EQUAL_TEST.splitlines().index("    same = torch.equal(out, y.cuda())") + 1
    assert found(EQUAL_TEST, "TL401") == [at]
    assert found(EQUAL_TEST.replace("torch.equal(", "torch.allclose("), "TL401") == [at]
    # near miss: two host tensors compared read nothing on the accelerator
    assert found(EQUAL_TEST.replace("torch.equal(out, y.cuda())", "torch.equal(x, y)"), "TL401") == []


COUNTS = """
import torch
import torch.nn.functional as F

model = torch.nn.Linear(4, 3).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
correct, total = 0, 0
for x, y in loader:
    out = model(x.cuda())
    loss = F.cross_entropy(out, y.cuda())
    correct += torch.eq(torch.max(out, dim=1)[1], y.cuda()).sum()
    total += loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_count_of_torch_eq_matches_holds_no_graph() -> None:
    # DeepSORT's `sum_num += torch.eq(pred, labels).sum()`: comparisons (also torch's functions of
    # them) record no graph; the loss added up does
    assert found(COUNTS, "TL302") == [COUNTS.splitlines().index("    total += loss") + 1]
    kept = COUNTS.replace("torch.eq(torch.max(out, dim=1)[1], y.cuda())", "torch.mul(out, 2)")
    assert found(kept, "TL302") == [kept.splitlines().index("    correct += torch.mul(out, 2).sum()") + 1, kept.splitlines().index("    total += loss") + 1]


# -- a batch moved element by element, then unpacked: its rows bound slices and its lengths size masks --
UNPACKED_BATCH = """
import torch

def length_to_mask(lengths):
    return torch.arange(lengths.max()).unsqueeze(0) < lengths.unsqueeze(1)

def train(model, loader, optimizer, device, config):
    n_down = config.n_down
    for batch in loader:
        batch = [b.to(device) for b in batch]
        texts, mels, lengths = batch
        mask = length_to_mask(lengths // (2 ** n_down))
        for i in range(len(lengths)):
            mel = mels[i, :, :LENGTH]
        loss = model(texts, mask, mel).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_rows_of_an_unpacked_moved_batch_bound_slices_and_size_masks_on_the_host() -> None:
    # StyleTTS2's shape: `batch = [b.to(device) for b in batch[1:]]` unpacked; a row of the lengths is a
    # slice bound, and the lengths divided by a factor read from the configuration size an arange
    assert found(UNPACKED_BATCH.replace("LENGTH", "lengths[i]"), "TL401") == [5, 14]


def test_a_slice_bounded_by_a_host_copy_of_the_lengths_reads_only_at_the_copy() -> None:
    # near miss: the lengths copied to the host once; their rows are numbers
    source = UNPACKED_BATCH.replace("LENGTH", "host_lengths[i]").replace(
        "        for i in range(len(lengths)):", "        host_lengths = lengths.tolist()\n        for i in range(len(lengths)):")
    assert found(source, "TL401") == [5, 13]  # (13: the copy)


# -- a device tensor copied into a tensor built on the host --------------------------------------------
PADDING = """
import torch

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)

    def forward(self, x):
        x, _ = self.lstm(x)
        x_pad = torch.zeros([x.shape[0], 64, x.shape[2]]PLACE)
        x_pad[:, :x.shape[1], :] = x
        return x_pad.to(x.device)

model = Encoder().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    loss = model(batch.cuda()).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_device_tensor_copied_into_a_host_tensor_syncs_every_step() -> None:
    # StyleTTS2's TextEncoder: `x_pad = torch.zeros([...])` then `x_pad[:, :, :x.shape[-1]] = x`
    [finding] = [d for d in lint(textwrap.dedent(PADDING.replace("PLACE", "")), "TL401", name="train.py") if d.code == "TL401"]
    assert (finding.line, finding.facts["kind"]) == (12, "host copy")
    assert "into a tensor on the host" in finding.message


def test_a_padding_tensor_built_on_the_device_copies_nothing_to_the_host() -> None:
    for place in (", device=x.device", ").to(x.device"):
        source = PADDING.replace("PLACE", place).replace("x.shape[2]]).to(x.device)", "x.shape[2]]).to(x.device)")
        assert found(source, "TL401") == [], place


def test_an_augmentation_helper_filling_a_host_tensor_from_its_arguments_is_no_copy(tmp_path: Path) -> None:
    # pytorch-pix2pix's `util.random_crop(x_, y_)`: called on the resized batch before it is moved; the
    # rows of an argument have the callers' place, not the accelerator's
    helper = """
    import numpy as np
    import torch

    def resize(imgs, size):
        outputs = torch.FloatTensor(imgs.size()[0], imgs.size()[1], size, size)
        for i in range(imgs.size()[0]):
            outputs[i] = torch.FloatTensor(np.resize(imgs[i].numpy(), (imgs.size()[1], size, size)))
        return outputs

    def random_crop(imgs, crop_size):
        outputs = torch.FloatTensor(imgs.size()[0], imgs.size()[1], crop_size, crop_size)
        for i in range(imgs.size()[0]):
            r = np.random.randint(0, imgs.size()[2] - crop_size)
            outputs[i] = imgs[i][:, r:r + crop_size, r:r + crop_size]
        return outputs
    """
    script = """
    import torch
    import util

    model = torch.nn.Conv2d(3, 3, 3).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, _ in torch.utils.data.DataLoader(dataset, batch_size=8):
        if resize:
            x = util.resize(x, 286)
        x = util.random_crop(x, 256)
        x = x.cuda()
        loss = model(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
    assert lint_project(tmp_path, {"util.py": helper, "train.py": script}, "TL401") == []


# -- a padded batch: a host tensor filled with the batch's own values before the move ----------------
PADDED_BATCH = """
import torch

def pad(seqs, lengths):
    seq_tensor = torch.zeros((len(seqs), lengths.max())).long()
    for idx, (seq, n) in enumerate(zip(seqs, lengths)):
        FILL
    return seq_tensor.cuda()

model = torch.nn.Embedding(128, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for names, labels in loader:
    seqs = [vocab.encode(name) for name in names]
    x = pad(seqs, torch.LongTensor([len(s) for s in seqs]))
    loss = model(x).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_host_tensor_filled_with_the_batch_s_values_is_data() -> None:
    # PyTorchZeroToAll's `pad_sequences`: `seq_tensor[idx, :seq_len] = torch.LongTensor(seq)`
    assert found(PADDED_BATCH.replace("FILL", "seq_tensor[idx, :n] = torch.LongTensor(seq)"), "TL406") == []


def test_a_host_tensor_filled_with_constants_is_still_built_on_the_host() -> None:
    for fill in ("seq_tensor[idx, :n] = 1", "seq_tensor[idx] = torch.ones(5).long()"):
        assert found(PADDED_BATCH.replace("FILL", fill), "TL406") == [8], fill


LABEL_VECTOR = """
import torch

class SegmentationLoss(torch.nn.Module):
    def forward(self, pred, se_pred, target):
        se_target = self._label_vector(target, pred.size(1)).type_as(pred)
        return torch.nn.functional.binary_cross_entropy_with_logits(se_pred, se_target)

    @staticmethod
    def _label_vector(target, nclass):
        vect = torch.zeros(target.size(0), nclass)
        for i in range(target.size(0)):
            hist = torch.histc(target[i].cpu().float(), bins=nclass, min=0, max=nclass - 1)
            FILL
        return vect

model, criterion = Net().cuda(), SegmentationLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, target in loader:
    x, target = x.cuda(), target.cuda()
    pred, se_pred = model(x)
    loss = criterion(pred, se_pred, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_host_tensor_a_helper_fills_with_the_batch_s_values_and_returns_is_data() -> None:
    # PyTorch-Encoding's SE loss: a histogram of each image's labels, filled on the host and moved
    assert found(LABEL_VECTOR.replace("FILL", "vect[i] = hist > 0"), "TL406") == []
    assert found(LABEL_VECTOR.replace("FILL", "vect[i] = 1"), "TL406") == [6]


# -- the loader's batch, read before the loop moves it -----------------------------------------------
TRIMMED_BATCH = """
import torch

def train(model, loader, optimizer, device):
    for i, (x, lengths) in enumerate(loader):
        READ
        x = x[:, :n].to(device)
        lengths = lengths.to(device)
        loss = model(x, lengths).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_the_loader_s_lengths_read_before_their_move_are_on_the_host() -> None:
    # a-PyTorch-Tutorial-to-Sequence-Labeling: `max_word_len = max(wmap_lengths.tolist())` trims the
    # batch before `wmap_lengths = wmap_lengths.to(device)`
    assert found(TRIMMED_BATCH.replace("READ", "n = max(lengths.tolist())"), "TL401") == []


def test_the_lengths_read_after_their_move_are_read_on_the_device() -> None:
    source = TRIMMED_BATCH.replace("READ", "n = 8").replace("        loss = model(", "        n = max(lengths.tolist())\n        loss = model(")
    assert found(source, "TL401") == [9]


# -- a batch read before a later move: the function moves it, so it was on the host --------------
# XLM's steps: `x, y, pred_mask = self.mask_out(x, lengths)`, asserts on the batch, then
# `to_cuda(x, y, pred_mask, lengths)` of a helper of another module that moves each argument
MASKED_STEP = """
import torch
from utils import to_cuda


class Trainer:
    def __init__(self, model, optimizer, data):
        self.model, self.optimizer, self.data = model, optimizer, data

    def mask_out(self, x, lengths):
        n = (x == 0).sum().item()
        pred_mask = torch.rand(x.size()) < 0.15
        return x.masked_fill(pred_mask, n), x[pred_mask], pred_mask

    def step(self):
        x, lengths = self.data.get_batch()
        BEFORE
        x, y, pred_mask = self.mask_out(x, lengths)
        x, y, pred_mask, lengths = MOVE
        AFTER
        loss = self.model(x, lengths, pred_mask, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def train(self):
        self.model.cuda()
        for _ in range(1000):
            self.step()
"""
TO_CUDA = """
def to_cuda(*args):
    return [None if x is None else x.cuda() for x in args]
"""


def _masked_step(tmp_path: Path, before: str, after: str, move: str = "to_cuda(x, y, pred_mask, lengths)") -> list[str]:
    step = MASKED_STEP.replace("BEFORE", before).replace("AFTER", after).replace("MOVE", move)
    return lint_project(tmp_path, {"train.py": step, "utils.py": TO_CUDA}, "TL401")


def test_a_batch_read_before_the_step_moves_it_is_on_the_host(tmp_path: Path) -> None:
    assert _masked_step(tmp_path, "assert (lengths - 1).sum().item() > 0", "pass") == []


def test_a_batch_read_before_a_move_by_a_helper_of_its_own_module_is_on_the_host(tmp_path: Path) -> None:
    step = MASKED_STEP.replace("BEFORE", "assert (lengths - 1).sum().item() > 0").replace("AFTER", "pass")
    step = step.replace("MOVE", "to_cuda(x, y, pred_mask, lengths)").replace("from utils import to_cuda\n", TO_CUDA)
    assert lint_project(tmp_path, {"train.py": step}, "TL401") == []


def test_the_batch_read_after_the_move_is_read_on_the_device(tmp_path: Path) -> None:
    assert _masked_step(tmp_path, "pass", "assert (lengths - 1).sum().item() > 0") == ["train.py:20:TL401"]


def test_a_batch_the_step_never_moves_keeps_its_unknown_place(tmp_path: Path) -> None:
    # (moved by nothing the analysis can see: read as the device's, as before)
    found = _masked_step(tmp_path, "assert (lengths - 1).sum().item() > 0", "pass", move="x, y, pred_mask, lengths")
    assert found == ["train.py:11:TL401", "train.py:17:TL401"]


@pytest.mark.parametrize("moves", [
    # under a condition the read is not under: YOLOX's `if mode == "cpu":` brings back what that mode copied
    "if self.mode == 'cpu':\n            x, y, pred_mask, lengths = to_cuda(x, y, pred_mask, lengths)",
    # in the handler of an error (an out-of-memory fallback computed on the CPU)
    "try:\n            pass\n        except RuntimeError:\n            x, y, pred_mask, lengths = to_cuda(x, y, pred_mask, lengths)",
    # a cast (`dtype = x.dtype`), not a move
    "dtype = x.dtype\n        lengths = lengths.to(dtype)",
    # its shape only, read into a tensor the step moves
    "n = torch.zeros(lengths.size(0))\n        n = n.cuda()",
])
def test_a_move_on_one_path_a_cast_or_a_shape_read_does_not_place_the_batch(tmp_path: Path, moves: str) -> None:
    step = MASKED_STEP.replace("BEFORE", "assert (lengths - 1).sum().item() > 0").replace("AFTER", "pass")
    step = step.replace("x, y, pred_mask, lengths = MOVE", moves)
    found = lint_project(tmp_path, {"train.py": step, "utils.py": TO_CUDA}, "TL401")
    assert "train.py:17:TL401" in found


# XLM's `generate_batch`: the batch noised by a helper (`add_noise` asserting on it) and concatenated,
# then returned to steps that each move what they get
RETURNED_BATCH = """
import torch
from utils import to_cuda


class Trainer:
    def __init__(self, model, optimizer, data):
        self.model, self.optimizer, self.data = model, optimizer, data

    def add_noise(self, words, lengths):
        assert (words[0] == 1).sum().item() == lengths.size(0)
        return words, lengths

    def generate_batch(self):
        x1, len1 = self.data.get_batch()
        x1, len1 = self.add_noise(x1, len1)
        x = torch.cat([x1, x1])
        return x, len1

    def step(self):
        x, lengths = self.generate_batch()
        x, lengths = to_cuda(x, lengths)
        loss = self.model(x, lengths)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
OTHER
    def train(self):
        self.model.cuda()
        for _ in range(1000):
            self.step()
"""


def test_a_batch_returned_to_steps_that_each_move_it_is_on_the_host_in_the_helpers_on_its_way(tmp_path: Path) -> None:
    files = {"train.py": RETURNED_BATCH.replace("OTHER", ""), "utils.py": TO_CUDA}
    assert lint_project(tmp_path, files, "TL401") == []


def test_a_batch_returned_also_where_nothing_moves_it_keeps_its_unknown_place(tmp_path: Path) -> None:
    other = "\n    def peek(self):\n        x, lengths = self.generate_batch()\n        return x\n"
    files = {"train.py": RETURNED_BATCH.replace("OTHER", other), "utils.py": TO_CUDA}
    assert lint_project(tmp_path, files, "TL401") == ["train.py:11:TL401"]


# -- a module's `forward` given what this module's step passes it -----------------------------------
# the model and its loop in one script: `model(x.cuda(), mask.cuda())` hands `forward` device tensors
FORWARD_ARGUMENTS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, mask):
        if mask.any():
            x = x * 2
        same = torch.equal(x, mask)
        return self.fc(x).sum() + same


def train(model, loader, opt):
    model = model.cuda()
    for x, mask in loader:
        loss = model(ARGUMENTS)
        opt.zero_grad()
        loss.backward()
        opt.step()


train(Net(), [], None)
"""


def test_a_forward_reads_on_the_host_what_the_step_of_its_module_passes_on_the_device() -> None:
    assert sorted(found(FORWARD_ARGUMENTS.replace("ARGUMENTS", "x.cuda(), mask.cuda()"), "TL401")) == [12, 14]


def test_a_forward_given_a_host_tensor_by_the_step_reads_nothing_from_the_device() -> None:
    assert found(FORWARD_ARGUMENTS.replace("ARGUMENTS", "x, mask"), "TL401") == []


# -- a batch converted to NumPy, augmented, and wrapped again is data ------------------------------
POINT_CLOUDS = """
import torch


def train(classifier, loader, optimizer, augment):
    for points, target in loader:
        points = points.data.numpy()
        points[:, :, 0:3] = augment(points[:, :, 0:3])
        points = torch.Tensor(points)
        points, target = points.float().cuda(), target.long().cuda()
        noise = torch.Tensor(8, 3)
        loss = classifier(points + noise.cuda(), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_the_loader_s_batch_converted_and_wrapped_again_is_data_not_a_tensor_built_here() -> None:
    assert found(POINT_CLOUDS, "TL406") == [12]  # the noise, not the points


# the blocks of an `nn.ModuleList`, called by index from the model's `forward`
LAYERS = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, queries, keys):
        self_attention = torch.equal(queries, keys)
        return self.proj(queries) if self_attention else self.proj(keys)


class Encoder(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList([Attention(d) for _ in range(n)])

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x, KEYS)
        return x


def train(model, loader, opt):
    model = model.cuda()
    for x in loader:
        loss = model(x.cuda()).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


train(Encoder(8, 2), [], None)
"""


def test_a_block_of_a_module_list_called_by_index_is_given_the_activations() -> None:
    assert found(LAYERS.replace("KEYS", "x"), "TL401") == [12]


def test_a_block_of_a_module_list_given_host_tensors_reads_nothing_from_the_device() -> None:
    assert found(LAYERS.replace("KEYS", "torch.zeros(8)").replace("self.layers[i](x,", "self.layers[i](torch.ones(8),"), "TL401") == []


# a policy update wrapping each state the episodes stored, one by one, in a comprehension
EPISODES = """
import torch


def update(policy, optimizer, episodes, device):
    for _ in range(10):
        states = torch.stack([torch.Tensor(s).float().to(device) for s in episodes.states])
        scales = torch.stack([torch.Tensor(s).to(device) for s in [[1.0], [2.0]]])
        loss = policy(states * scales).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_elements_a_comprehension_draws_from_stored_episodes_are_data_and_written_ones_are_not() -> None:
    assert found(EPISODES, "TL406") == [8]


# a batched seq2seq: random pairs drawn from the corpus, padded row by row in a comprehension, wrapped and moved
PADDED = """
import random
import torch


def pad_seq(seq, n):
    return seq + [0] * (n - len(seq))


def random_batch(pairs, size):
    seqs = [random.choice(pairs)[0] for _ in range(size)]
    longest = max(len(s) for s in seqs)
    padded = ROWS
    return torch.LongTensor(padded).cuda()


def train(model, optimizer, pairs):
    for step in range(1000):
        loss = model(random_batch(pairs, 32)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_rows_a_comprehension_makes_of_drawn_data_are_data() -> None:
    assert found(PADDED.replace("ROWS", "[pad_seq(s, longest) for s in seqs]"), "TL406") == []


def test_rows_a_comprehension_makes_of_a_range_are_built_here() -> None:
    assert found(PADDED.replace("ROWS", "[[i] * longest for i in range(4)]"), "TL406") == [14]


# a Hugging Face tokenizer's `return_tensors="pt"` batch is built on the host, until it is moved
TOKENIZED = """
import torch


def train(model, tokenizer, loader, opt, device):
    for text in loader:
        prompt = tokenizer(text, return_tensors="pt", truncation=True)["input_ids"][0].tolist()
        enc = tokenizer(text, return_tensors="pt")
        first = enc["input_ids"][0, 0].item()
        ids = enc["input_ids"].to(device)
        last = ids[0, -1].item()
        loss = model(ids).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_tokenizer_s_tensors_are_read_on_the_host_until_they_are_moved() -> None:
    assert found(TOKENIZED, "TL401") == [11]


# lengths handed to `pack_padded_sequence`, which copies them to the CPU (`torch.as_tensor(..., device="cpu")`)
PACKED = """
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True)

    def forward(self, x, lengths, host_lengths):
        a = pack_padded_sequence(x, list(lengths), batch_first=True)
        b = pack_padded_sequence(x, lengths=lengths, batch_first=True)
        c = pack_padded_sequence(x, host_lengths, batch_first=True)
        return [self.rnn(packed)[0] for packed in (a, b, c)]


def train(model, loader, opt):
    model = model.cuda()
    for x, lengths in loader:
        loss = sum(out.data.sum() for out in model(x.cuda(), lengths.cuda(), lengths))
        opt.zero_grad()
        loss.backward()
        opt.step()


train(Tagger(), [], None)
"""


def test_device_lengths_given_to_pack_padded_sequence_are_read_on_the_host() -> None:
    assert found(PACKED, "TL401") == [13, 14]  # not the loader's host lengths


# the lengths a decoder hands back as a host list (`(caption_lengths - 1).tolist()`), then packed
CAPTIONS = """
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence


def train(encoder, decoder, loader, criterion, opt):
    for imgs, caps, caplens in loader:
        imgs, caps, caplens = imgs.cuda(), caps.cuda(), caplens.cuda()
        scores, caps_sorted, decode_lengths = decoder(encoder(imgs), caps, caplens)
        scores, _ = pack_padded_sequence(scores, decode_lengths, batch_first=True)
        targets, _ = pack_padded_sequence(caps_sorted[:, 1:], caplens - 1, batch_first=True)
        loss = criterion(scores, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_lengths_a_module_returns_are_not_known_on_the_device_and_moved_ones_are() -> None:
    assert found(CAPTIONS, "TL401") == [12]


# -- a sum of values the analysis cannot name may be a tensor -------------------------------------
def test_a_sum_of_a_loss_dicts_values_is_read_where_its_item_is() -> None:
    # DETR's engine: `losses_reduced_scaled = sum(loss_dict_reduced_scaled.values())` of what a
    # helper reduced across processes, then `.item()` every step; near misses: a sum of sizes is a
    # number, and one of a list of Python floats read back with `float` waits for nothing
    code = """
        import torch

        for samples, targets in loader:
            outputs = model(samples.cuda())
            loss_dict = criterion(outputs, targets)
            losses = sum(loss_dict[k] * weights[k] for k in loss_dict.keys() if k in weights)
            reduced = reduce_dict(loss_dict)
            total = sum(reduced.values())
            loss_value = total.item()
            count = sum(p.numel() for p in model.parameters())
            print(count)
            floats = [1.0, 2.0]
            logged = float(sum(floats))
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()
    """
    assert found(code, "TL401") == [10]


# -- what a NumPy helper of another module returns is host data, whatever it was given ---------------
NUMPY_HELPERS = {
    "utils.py": """
        import numpy as np


        def rainfall_to_pixel(rainfall, a=58.53, b=1.56):
            dbr = np.log10(rainfall) * 10.0
            dbz = dbr * b + 10.0 * np.log10(a)
            return (dbz + 10.0) / 70.0


        def scaled(values, factor):
            return np.log10(values) * factor
    """,
    "train.py": """
        import torch
        from utils import rainfall_to_pixel, scaled

        model = torch.nn.Linear(4, 4).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        thresholds = [0.5, 2, 5]
        for x, factor in loader:
            opt.zero_grad()
            loss = model(x.cuda()).sum()
            loss.backward()
            opt.step()
            levels = rainfall_to_pixel(thresholds).tolist()
            weights = scaled(thresholds, factor.cuda()).tolist()
    """,
}


def test_a_numpy_helper_s_result_is_read_without_a_sync_unless_a_device_tensor_joins_it(tmp_path: Path) -> None:
    # `np.log10(...)` cannot read a device tensor: its result, scaled by numbers, is host data; scaled
    # by a parameter (here the device's `factor`), it may be a device tensor
    assert lint_project(tmp_path, NUMPY_HELPERS, "TL401") == ["train.py:14:TL401"]


# -- a tensor method combining its receiver with a device tensor computes on the device ------------
ACCURACY = """
import torch


def main(model, loader, optimizer, device):
    for x, y in loader:
        def train_step():
            out = model(x.to(device))
            loss = torch.nn.functional.cross_entropy(out, y.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            top1 = {read}
            return top1
        top1 = train_step()
"""


def test_an_index_compared_with_a_moved_batch_is_a_device_tensor() -> None:
    # `out` comes from a model the code cannot see: `.eq()` with the moved labels says where it is
    code = ACCURACY.format(read="float(out.max(dim=1).indices.eq(y.to(device)).sum())")
    assert found(code, "TL401") == [13]


def test_the_batch_compared_with_its_own_labels_stays_on_the_host() -> None:
    # (`x` and `y` as the loader gives them: the model reads a moved copy, the comparison the host's)
    code = ACCURACY.format(read="float(x.eq(y).sum())")
    assert found(code, "TL401") == []


# -- a factory given `device=t.device` builds where `t` is -----------------------------------------
BESIDE = """
import torch


def train(model, loader, optimizer, device):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        weights = torch.ones(len(y), device=PLACE.device)
        if weights.sum() > 0:
            print("weighted")
"""


@pytest.mark.parametrize("place, lines", [
    ("y", [13]),  # beside the labels on the device: the test reads it
    ("torch.arange(4)", []),  # beside a tensor built on the host: nothing waits
])
def test_a_factory_builds_beside_the_tensor_whose_device_it_is_given(place: str, lines: list[int]) -> None:
    assert found(BESIDE.replace("PLACE", place), "TL401") == lines


# -- iterating a dict gives its keys, not its values ------------------------------------------------
KEYS_OF_A_BATCH = """
import torch


def train(criterion, loader, device):
    net = torch.nn.Linear(3, 3).to(device)
    optimizer = torch.optim.Adam(net.parameters())
    for batch_idx, batch in enumerate(loader):
        for key in batch:
            batch[key] = batch[key].to(device)
        end_points = net({"points": batch["points"]})
        for key in ITERATED:
            assert key not in end_points
            end_points[key] = batch[key]
        loss = criterion(end_points)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.parametrize("iterated, lines", [
    ("batch", []),  # (votenet) a key of the batch, looked for among the outputs' keys: no tensor is read
    ("[batch[\"points\"], batch[\"labels\"]]", [13]),  # the batch's tensors, each looked for in the output: `__contains__` reads it
])
def test_the_keys_of_a_dict_moved_key_by_key_are_no_tensors(iterated: str, lines: list[int]) -> None:
    assert found(KEYS_OF_A_BATCH.replace("ITERATED", iterated), "TL401") == lines
