"""The per-step analysis that every rule relies on, exercised through TL401 (host syncs)."""

from __future__ import annotations

import pytest

from tests.helpers import lines


def sync_lines(code: str) -> list[int]:
    """TL401's findings for `code` in a module that uses a GPU.

    TL401 stays silent on modules with no sign of a device; these tests probe the per-step analysis,
    so each snippet gets a trailing `model.cuda()` (after its last line, so line numbers hold).
    """
    return lines(code + "model.cuda()\n", "TL401")


def test_item_every_step_in_plain_loop():
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    """
    assert sync_lines(code) == [7]


def test_gated_logging_is_not_per_step():
    code = """
    import torch
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(loss.item())
        if it % log_interval == 0 and master_process:
            lossf = loss.item()
        if step == 0:
            print(float(loss))
        if args.log_metrics:
            wandb.log({"loss": loss.item()})
    """
    assert sync_lines(code) == []


def test_a_few_chosen_steps_are_a_gate():
    # mixup's GAN example plots at `if iteration in [10, 100, 1000, 10000, 20000]:`; a membership
    # test in a name the analysis cannot read (`milestones`) is no step gate
    code = """
    for iteration in range(20000):
        loss = model(next(data)).mean()
        loss.backward()
        optimizer.step()
        if iteration in [10, 100, 1000, 10000, 20000]:
            plot(loss.cpu().numpy())
        if iteration in milestones:
            print(loss.item())
    """
    assert sync_lines(code) == [9]


def test_gate_computed_into_a_variable():
    code = """
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        is_report_step = (step + 1) % cfg.n == 0
        if is_report_step:
            print(loss.item())
    """
    assert sync_lines(code) == []


def test_item_after_the_loop_and_at_epoch_level_is_not_per_step():
    code = """
    for epoch in range(10):
        for x in loader:
            loss = model(x)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: {loss.item()}")
    print(loss.item())
    """
    assert sync_lines(code) == []


def test_function_called_from_the_step_loop_is_per_step():
    code = """
    def log_step(loss):
        print(loss.item())

    def train(loader):
        for x in loader:
            loss = model(x)
            loss.backward()
            optimizer.step()
            log_step(loss)
    """
    # `log_step` only reads what it is passed: the sync is reported at the call, where the value is
    # known, once (not again inside the helper)
    assert sync_lines(code) == [10]


def test_step_function_called_from_a_loop_and_from_main():
    code = """
    def train_one_step(model, batch, optimizer):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        return loss.item()

    def main():
        for epoch in range(3):
            for batch in loader:
                train_one_step(model, batch, optimizer)
    """
    assert sync_lines(code) == [6]


def test_gated_call_does_not_make_callee_per_step():
    code = """
    def report(loss):
        print(loss.item())

    for step, x in enumerate(loader):
        loss = model(x)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            report(loss)
    """
    assert sync_lines(code) == []


def test_early_return_gate_in_a_helper():
    code = """
    def maybe_log(step, loss):
        if step % 10 != 0:
            return
        print(loss.item())

    for step, x in enumerate(loader):
        loss = model(x)
        loss.backward()
        optimizer.step()
        maybe_log(step, loss)
    """
    assert sync_lines(code) == []


def test_except_handler_is_not_per_step():
    code = """
    for x in loader:
        try:
            loss = model(x)
            loss.backward()
            optimizer.step()
        except RuntimeError:
            print(loss.item())
    """
    assert sync_lines(code) == []


def test_evaluation_loop_without_backward_is_not_a_step_loop():
    code = """
    import torch
    def evaluate(model, loader):
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += criterion(model(x), y).item()
        return total
    """
    assert sync_lines(code) == []


def test_lightning_training_step_is_a_step_hook():
    code = """
    import lightning as L
    class LitModel(L.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.model(batch)
            self.log("loss", loss.item())
            return loss
    """
    assert sync_lines(code) == [6]


def test_hf_trainer_compute_loss_override_is_a_step_hook():
    code = """
    from transformers import Trainer
    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False):
            outputs = model(**inputs)
            loss = outputs.loss
            print(f"loss {loss:.3f}")
            return loss
    """
    assert sync_lines(code) == [7]


def test_compute_loss_outside_a_trainer_is_not_a_hook():
    code = """
    class Metrics:
        def compute_loss(self, outputs):
            return outputs.loss.item()
    """
    assert sync_lines(code) == []


def test_nanogpt_style_while_loop_with_accumulation():
    code = """
    import torch
    while True:
        if iter_num % eval_interval == 0 and master_process:
            losses = estimate_loss()
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % log_interval == 0 and master_process:
            lossf = loss.item() * gradient_accumulation_steps
        iter_num += 1
    """
    assert sync_lines(code) == []


def test_sync_chain_is_one_finding_and_float_of_tensor_counts():
    code = """
    import torch
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        preds = out.argmax(1).cpu().numpy()
        value = float(loss)
        n = int(step)
        if torch.isnan(loss):
            break
    """
    assert sync_lines(code) == [8, 9, 11]


def test_configured_step_function_and_gate_names():
    code = """
    def do_update(batch):
        loss = model(batch.cuda())
        print(loss.item())
        if flush_now:
            print(loss.item())
    """
    from tests.helpers import lint

    found = lint(code, "TL401", step_functions=frozenset({"do_update"}), gate_names=frozenset({"flush_now"}))
    assert [d.line for d in found] == [4]


def test_library_function_that_backpropagates_once_is_not_per_step():
    code = """
    import torch
    from torch.overrides import has_torch_function_unary
    def check_gradients(model, x):
        loss = model(x).sum()
        loss.backward()
        if has_torch_function_unary(x):
            return None
        if not torch.allclose(x.grad, ref):
            print(loss.item())
    """
    assert sync_lines(code) == []


def test_predicates_of_torch_are_not_tensors():
    code = """
    import torch
    def train_step(batch):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if torch.is_grad_enabled() and torch.cuda.is_available():
            pass
        if not torch.isfinite(loss).all():
            pass
    """
    assert sync_lines(code) == [9]


# -- what makes a loop a training loop (found on real projects) ----------------------------------
def test_gradient_helper_called_in_a_plotting_loop_is_not_a_step():
    # a notebook: input gradients for a plot, in a module that trains elsewhere with an optimizer
    code = """
    import torch
    def get_grads(act_fn, x):
        x = x.clone().requires_grad_()
        act_fn(x).sum().backward()
        return x.grad

    def vis(act_fn, x):
        y_grads = get_grads(act_fn, x)
        return y_grads.cpu().numpy()

    for act_fn in act_fns:
        vis(act_fn, x)

    def train(model, loader, optimizer):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            print(loss.item())
    """
    assert sync_lines(code) == [21]


def test_manual_sgd_through_grad_is_a_step():
    code = """
    import torch
    for t in range(500):
        loss = (model(x) - y).pow(2).sum()
        print(t, loss.item())
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 1e-4 * p.grad
    """
    assert sync_lines(code) == [5]


def test_library_updates_keep_backprop_loops_as_steps():
    # no optimizer step in sight: the update happens in a library call, so backward alone marks the step
    code = """
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        trainer.apply_update()
        print(loss.item())
    """
    assert sync_lines(code) == [6]


def test_backprop_helper_in_lightning_module_is_not_a_step():
    code = """
    import lightning as L
    def show_receptive_field(img, out):
        out.sum().backward(retain_graph=True)
        return img.grad.abs().cpu().numpy()

    class PixelCNN(L.LightningModule):
        def training_step(self, batch, batch_idx):
            return self.loss(batch)

    for layer in range(4):
        show_receptive_field(img, layers[layer](img))
    """
    assert sync_lines(code) == []
    assert lines(code, "TL301") == []


def test_kernel_backward_with_three_arguments_is_not_autograd():
    code = """
    import torch
    for qlen in [128, 256]:
        out = softmax_cuda.forward(inputs, masks, scale)
        grad = softmax_cuda.backward(grad_out, out, scale)
        print(out.max().item())
    """
    assert sync_lines(code) == []


def test_item_on_a_host_tensor_is_not_a_sync():
    code = """
    import torch
    scale = torch.tensor([1.0])
    on_gpu = torch.tensor([1.0], device="cuda")
    for x, y in loader:
        loss = criterion(model(x), y) * scale[0].item()
        loss.backward()
        optimizer.step()
        print(on_gpu.item())
    """
    assert sync_lines(code) == [9]


def test_a_name_is_what_reaches_its_use():
    code = """
    import torch
    for epoch in range(3):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            losses = loss.item()
            print(f"{losses}")
            if torch.isnan(loss):
                break
        losses = torch.cat(val_losses)
    """
    # the `.item()` itself and the `if` on a tensor; the f-string formats a float
    assert sync_lines(code) == [8, 10]


def test_error_paths_are_not_per_step():
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss).all(), f"bad loss {loss}"
        if step > limit:
            raise RuntimeError(f"diverged at {loss.item()}")
    """
    assert sync_lines(code) == [7]


def test_deepspeed_engine_named_model_steps_weights():
    code = """
    import deepspeed
    model, optimizer, _, scheduler = deepspeed.initialize(model=net, config=cfg)
    for batch in loader:
        loss = model(batch)
        model.backward(loss)
        model.step()
        print(loss.item())

    def evaluate(other, val_loader, opt):
        for batch in val_loader:
            other(batch).backward()
        opt.step()
    """
    assert sync_lines(code) == [8]


def test_cpu_only_script_has_no_host_syncs():
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    """
    assert lines(code, "TL401") == []
    assert lines(code.replace("model(x)", "model(x.to(device))"), "TL401") == [7]


def test_anomaly_detection_in_a_unit_test_is_not_a_training_run():
    code = """
    import torch

    def test_train_step():
        with torch.autograd.set_detect_anomaly(True):
            for x in batches:
                model(x.cuda()).sum().backward()
                optimizer.step()
    """
    from tests.helpers import lint

    assert [d.line for d in lint(code, "TL404", name="train.py")] == [5]
    assert lint(code, "TL404", name="tests/test_model.py") == []


def test_no_grad_of_a_notebook_that_never_imports_torch_by_name():
    """A notebook cell that imports only `from torch import nn` and writes `with torch.no_grad():`
    (torch bound by another cell or package) is evaluating without autograd."""
    code = """
    from torch import nn

    def evaluate(net, data_iter):
        net.eval()
        with torch.no_grad():
            for X, y in data_iter:
                acc = (net(X).argmax(1) == y).float().mean()
        return acc
    """
    assert lines(code, "TL303") == []
    assert lines(code.replace("with torch.no_grad():", "if True:"), "TL303") == [8]


def test_a_module_that_makes_cuda_the_default_builds_its_factories_there():
    """`torch.set_default_tensor_type("torch.cuda.FloatTensor")` (old SSD-style scripts): `torch.ones(...)`
    is a device tensor, so `.cpu()` of it waits for the GPU and `.to("cuda")` copies nothing."""
    code = """
    import torch
    torch.set_default_tensor_type("torch.cuda.FloatTensor")
    model.cuda()
    for x, y in loader:
        loss = model(x.cuda(), y)
        loss.backward()
        optimizer.step()
        mask = torch.ones(4).to("cuda")
        viz = torch.ones((1, 3)).cpu()
    """
    assert lines(code, "TL401") == [10] and lines(code, "TL406") == []
    host = code.replace('torch.set_default_tensor_type("torch.cuda.FloatTensor")', "")
    assert lines(host, "TL401") == [] and lines(host, "TL406") == [9]


def test_a_module_that_names_itself_calls_its_own_functions():
    """`d2l = sys.modules[__name__]` (tutorial packages): `d2l.grad_clipping(net, 1)` in the step runs
    this module's `grad_clipping`, whose `if norm > theta:` reads a device tensor."""
    code = """
    import sys
    import torch
    d2l = sys.modules[__name__]

    def grad_clipping(net, theta):
        params = [p for p in net.parameters() if p.requires_grad]
        norm = torch.sqrt(sum(torch.sum(p.grad ** 2) for p in params))
        if norm > theta:
            for param in params:
                param.grad[:] *= theta / norm

    def train_seq2seq(net, data_iter, optimizer, device):
        for X, Y in data_iter:
            l = torch.nn.functional.cross_entropy(net(X.to(device)), Y.to(device))
            l.backward()
            d2l.grad_clipping(net, 1)
            optimizer.step()
    """
    assert sync_lines(code) == [9]
    # `d2l` a library module: its `grad_clipping` is not this one, which nothing calls
    assert sync_lines(code.replace("d2l = sys.modules[__name__]", "import d2l")) == []


def test_a_parameter_declared_as_a_module_takes_the_class_its_callers_pass():
    """`criterion: nn.Module` says what kind of value, not which class: the loss module the caller
    passes runs its `forward` every step."""
    code = """
    import torch
    from torch import nn

    class SSIMLoss(nn.Module):
        def forward(self, y_hat, y):
            loss = (y_hat - y).abs().mean()
            if loss.item() > 1.0:
                print(f"out of range {loss.item()}")
            return loss

    def train_step(model, criterion: nn.Module, x, y, optimizer):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

    def main(model, loader, optimizer):
        criterion = SSIMLoss()
        for x, y in loader:
            train_step(model, criterion, x.cuda(), y.cuda(), optimizer)
    """
    # one finding: the test's read; its body runs only when the data says so
    assert sync_lines(code) == [8]
    assert sync_lines(code.replace("criterion = SSIMLoss()", "criterion = nn.MSELoss()")) == []


def test_a_class_chosen_by_a_setting_runs_the_forward_of_each():
    """`klass = CharacterEmbed if not interpolated else InterpolatedEmbed; self.embed = klass(dim)`: the
    object is one of the two, and both `forward`s run every step."""
    code = """
    import torch
    from torch import nn

    class CharacterEmbed(nn.Module):
        def forward(self, text, mask):
            return text

    class InterpolatedEmbed(nn.Module):
        def forward(self, text, mask):
            seq_len = mask.sum().long().item()
            return text[:seq_len]

    class TTS(nn.Module):
        def __init__(self, interpolated):
            super().__init__()
            klass = CharacterEmbed if not interpolated else InterpolatedEmbed
            self.embed = klass(8)

        def forward(self, text, mask):
            return self.embed(text, mask)

    def train(interpolated, loader, optimizer):
        model = TTS(interpolated).cuda()
        for text, mask in loader:
            model(text.cuda(), mask.cuda()).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert sync_lines(code) == [11]
    # a name bound to something else than this module's classes: unknown, nothing followed
    assert sync_lines(code.replace("klass = CharacterEmbed if not interpolated else InterpolatedEmbed", "klass = make_embed(interpolated)")) == []


def test_a_comprehension_variable_is_an_element_of_its_iterable():
    """`[torch.cat((q, r)).tolist() for q, r in zip(queries, responses)]` over host copies reads the
    host; over device tensors it syncs, and so does `if` on a device element in a generator."""
    code = """
    import torch

    def train(model, loader, optimizer):
        model.cuda()
        for batch in loader:
            queries = [q.cpu() for q in model(batch.cuda())]
            responses = [r.cpu() for r in model(batch.cuda())]
            ids = [torch.cat((q, r)).tolist() for q, r in zip(queries, responses)]
            losses = [model(x) for x in batch.cuda()]
            if any(bool(l > 10) for l in losses):
                print("large")
            sum(losses).backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    # the copies themselves (`q.cpu()`, `r.cpu()`) and `bool(l > 10)`: not the reads of the copies
    assert sync_lines(code) == [7, 8, 11]


def test_the_pairs_a_comprehension_unpacks_are_the_dicts_keys_and_values():
    """`{k: float(v) for k, v in losses.items()}` reads each device loss on the host (also through a
    dict comprehension that scales them first); the same over a dict of host numbers reads nothing."""
    code = """
    import torch

    def train(model, loader, optimizer, device):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            losses = {"mse": (out - y).pow(2).mean(), "l1": (out - y).abs().mean()}
            sum(losses.values()).backward()
            optimizer.step()
            optimizer.zero_grad()
            scaled = {k: v * 0.5 for k, v in losses.items()}
            logged = {name: float(value) for name, value in scaled.items()}
            stats = {"lr": optimizer.param_groups[0]["lr"], "epoch": 1}
            shown = {k: float(v) for k, v in stats.items()}
            lengths = y.sum(dim=1)
            cut = [row[:int(n)] for i, n in enumerate(lengths)]
    """
    assert sync_lines(code) == [13, 17]


@pytest.mark.parametrize(("move", "found"), [
    ('for k in batch:\n                if k != "meta":\n                    batch[k] = batch[k].to(device=device, non_blocking=True)', [6]),
    ("for k, v in batch.items():\n                batch[k] = v.to(device)", [6, 18]),
    ("for k in batch.keys():\n                batch[k] = batch[k].cuda()", [6, 18]),
])
def test_a_dict_moved_key_by_key_holds_device_values_after_the_loop(move: str, found: list[int]) -> None:
    """CenterNet's trainer moves the batch with `for k in batch: batch[k] = batch[k].to(device)`: the
    loss that tests `if num_pos == 0:` on a sum of `batch["mask"]` reads the device (also in a helper
    given the batch); a key the loop leaves where it was (`"meta"`, else moved too) and a dict rebound
    since hold none."""
    code = """
    import torch

    def focal(out, batch):
        num_pos = batch["mask"].sum()
        if num_pos == 0:
            return out.sum()
        return out.sum() / num_pos

    def train(model, loader, optimizer, device):
        for batch in loader:
            MOVE
            loss = focal(model(batch["input"]), batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            image_id = int(batch["meta"]["id"])
            batch = next(other)
            seen = int(batch["mask"].sum())
    """.replace("MOVE", move)
    assert sorted(sync_lines(code)) == found


def test_the_count_enumerate_gives_a_comprehension_is_not_a_constant():
    """`stoi = {ch: i for i, ch in enumerate(chars)}` numbers the characters of a text file: the
    tokens encoded with it are data, and the batches cut from them are no constant copied per step."""
    code = """
    import torch

    text = open("input.txt").read()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    encode = lambda s: [stoi[c] for c in s]
    data = torch.tensor(encode(text), dtype=torch.long)

    def get_batch():
        ix = torch.randint(len(data) - 8, (4,))
        x = torch.stack([data[i:i + 8] for i in ix])
        return x.to("cuda")

    def train(model, optimizer):
        for it in range(100):
            loss = model(get_batch())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert lines(code, "TL406") == []


def test_an_update_applied_to_each_replica_is_one_step_of_its_function():
    # d2l's multi-GPU training: each device's copy backpropagates, then each copy is updated in a loop
    # over the copies; the function is one step, so the loop calling it is the step loop
    code = """
    import torch
    def train_batch(shards, replicas, optimizers):
        losses = [loss_fn(replica(x), y) for (x, y), replica in zip(shards, replicas)]
        for l in losses:
            l.backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()

    def train_epochs(loader, replicas, optimizers):
        for batch in loader:
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()

    for X, y in train_iter:
        train_batch(split(X, y), replicas, optimizers)
        torch.cuda.synchronize()
    for epoch in range(10):
        train_epochs(train_iter, replicas, optimizers)
        torch.cuda.synchronize()
    """
    assert lines(code, "TL402") == [19]


def test_a_loop_over_a_loader_around_a_counted_step_loop_runs_once_per_step():
    # PPO/GRPO: each batch of prompts is rolled out, then optimised for a few epochs; the rollout
    # runs once per few steps. The loader is known by its value, not by what it is called.
    code = """
    import torch
    from torch.utils.data import DataLoader

    prompts = DataLoader(dataset, batch_size=8)
    for batch in prompts:
        rollout = generate(policy, batch)
        torch.cuda.empty_cache()
        for _ in range(4):
            loss = policy(rollout).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert lines(code, "TL304") == [8]
    # a loop over a list of settings named like data runs a whole training for each: not per step
    sweep = code.replace("prompts = DataLoader(dataset, batch_size=8)", "data = [0.1, 0.2]").replace("for batch in prompts:", "for batch in data:")
    assert lines(sweep, "TL304") == []


def test_loop_stepping_each_optimizer_is_one_step_of_the_loop_around_it():
    # `for opt in optimizers: opt.step()` updates each optimizer once per step: the loop around it
    # is the training loop, so its NaN guard and its logging read the loss every step
    code = """
    import torch
    optimizers = [torch.optim.AdamW(model.parameters()), torch.optim.SGD(head.parameters())]
    for step in range(train_steps):
        inputs, targets = next(train_loader)
        for i in range(len(inputs) // mbs):
            loss = model(inputs[i], targets[i])
            if not torch.isfinite(loss).all():
                raise RuntimeError(f"non-finite loss {loss.item()}")
            loss.backward()
        for opt, sched in zip(optimizers, schedulers):
            opt.step()
            sched.step()
        model.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")
        if step % 100 == 0:
            print(loss.item())
    print(loss.item())
    """
    assert sorted(sync_lines(code)) == [8, 15]


def test_loop_of_optimizers_that_backpropagates_each_round_is_its_own_step():
    # each round trains another network (a GAN's alternation): every round is a step, not the loop around
    code = """
    import torch
    for epoch in range(epochs):
        lr = schedule(epoch)
        print(lr.item())
        for opt, net in ((opt_d, disc), (opt_g, gen)):
            loss = net(batch).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    """
    assert sync_lines(code) == [10]


def test_early_exit_unless_one_step_leaves_the_rest_to_that_step():
    # `if step != CAPTURE_STEP: return` runs the rest on one step; `if n_items != 4: return` tests no
    # step counter, and the rest runs on every step where the batch has four items (reported at the
    # call: the helper only reads what it is passed)
    code = """
    import torch
    CAPTURE_STEP = 500

    def maybe_capture(model, step):
        if CAPTURE_STEP <= 0 or step != CAPTURE_STEP:
            return
        return {n: p.detach().cpu().clone() for n, p in model.named_parameters()}

    def log_sizes(n_items, loss):
        if n_items != 4:
            return
        print(loss.item())

    for step, x in enumerate(loader):
        loss = model(x)
        loss.backward()
        optimizer.step()
        maybe_capture(model, step)
        log_sizes(len(x), loss)
    """
    assert sync_lines(code) == [20]


def test_the_else_of_a_test_that_reads_a_tensor_is_not_reported_again():
    # a GAN's turn chosen by a counter kept on the device: the test syncs (reported); either turn
    # runs after it, when the data says so; a read after the `if` runs every step
    code = """
    import torch
    for x in loader:
        if update_count.item() % 2 == 0:
            d_loss = disc(x).mean()
            d_loss.backward()
            d_opt.step()
            out = {"d": d_loss.item()}
        else:
            g_loss = gen(x).mean()
            g_loss.backward()
            g_opt.step()
            out = {"g": g_loss.item()}
        update_count += 1
        print(x.sum().item())
    """
    assert sync_lines(code) == [4, 15]


def test_a_buffer_filled_when_empty_is_filled_once():
    # `if not len(self.q): self.q = ...` fills an empty buffer on the first step; a test of the
    # batch's length is no such thing, but the branch for an empty batch, taken on the rare steps whose
    # data is empty (a gate of its own: `gates.empty_data_test`)
    code = """
    import torch
    class GroupDRO:
        def update(self, minibatches):
            if not len(self.q):
                self.q = torch.ones(len(minibatches)).cuda()
                print(self.q.sum().item())
            if not len(minibatches):
                print(self.q.sum().item())
            loss = self.net(minibatches).mean()
            loss.backward()
            self.optimizer.step()
            return {"loss": loss.item()}
    """
    assert sync_lines(code) == [13]
    assert sync_lines(code.replace("if not len(minibatches):", "if len(minibatches) > 1:")) == [9, 13]


def test_a_module_level_cache_declared_global_is_built_once():
    # SfmLearner's inverse warp: `global pixel_coords; if pixel_coords is None or ...: set_id_grid(x)`
    # builds the grid once per size; a module-level name nobody declares `global` is no cache
    code = """
    import torch

    grid = None
    scaler = None


    def build_grid(x):
        global grid
        grid = torch.arange(x.size(1)).cuda()
        print(grid.sum().item())


    def step(x):
        global grid
        if (grid is None) or grid.size(0) < x.size(1):
            build_grid(x)
        if scaler is None:
            print(x.sum().item())
        loss = model(x + grid[: x.size(1)]).mean()
        loss.backward()
        optimizer.step()


    for x in loader:
        step(x)
    """
    assert sync_lines(code) == [19]
    # without `global`, build_grid binds a local: the module's grid stays None, built every step
    assert sync_lines(code.replace("        global grid\n", "")) == [10, 17]


NAN_CHECK = """
    import torch

    DEBUG = False


    def render(model, rays):
        out = model(rays)
        if {test}:
            print("non-finite output")
        return out


    def main(loader):
        model = torch.nn.Linear(3, 3).cuda()
        opt = torch.optim.Adam(model.parameters())
        for rays in loader:
            loss = render(model, rays.cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_tensor_test_before_a_debug_flag_is_read_every_step():
    # Python truth-tests the left operand first: `and DEBUG` decides nothing until both reads are done
    test = "(torch.isnan(out).any() or torch.isinf(out).any()) and DEBUG"
    assert lines(NAN_CHECK.format(test=test), "TL401") == [9]


def test_a_tensor_test_after_a_debug_flag_is_gated_by_it():
    assert lines(NAN_CHECK.format(test="DEBUG and torch.isnan(out).any()"), "TL401") == []


def test_a_tensor_test_after_a_flag_that_stays_set_is_gated_by_it():
    # `if use_the_queue or not torch.all(...)`: once the flag is set, the tensor is never read again
    assert lines(NAN_CHECK.format(test="DEBUG or not torch.all(out == 0)"), "TL401") == []


EMA_LOG = """
    import torch


    def train(model, optimizer, loader):
        for epoch in range(10):
            loss_ema = None
            for x in loader:
                loss = model(x.cuda()).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if loss_ema is None:
                    loss_ema = loss.item()
                else:
                    loss_ema = 0.9 * loss_ema + 0.1 * loss.item()
{reset}
"""


def test_a_name_s_first_value_is_given_on_the_first_step_only():
    # the `if loss_ema is None:` body runs on the first step of each epoch; the `else`, on every other
    assert lines(EMA_LOG.format(reset=""), "TL401") == [16]


def test_a_name_set_back_to_none_every_step_is_read_every_step():
    reset = "                loss_ema = None"
    assert lines(EMA_LOG.format(reset=reset), "TL401") == [14, 16]


GAN_STEP = """
import torch


class GAN:
    def optimize_parameters(self, step, x):
        self.G_optimizer.zero_grad()
        fake = self.netG(x.cuda())
        if step % self.D_update_ratio == 0:
            G_loss = -self.netD(fake).mean()
            G_loss.backward()
            self.G_optimizer.step()
        self.D_optimizer.zero_grad()
        D_loss = self.netD(fake.detach()).mean() - self.netD(x.cuda()).mean()
        D_loss.backward()
        self.D_optimizer.step()
        {rebinding}if step % self.D_update_ratio == 0:
            self.log_dict["G_loss"] = G_loss.item()
        if step % 100 == 0:
            self.log_dict["D_loss"] = D_loss.item()
"""


def test_an_if_testing_what_the_step_branch_tests_runs_as_often_as_that_step():
    # the generator's losses logged under the test that holds the generator's step: every step it
    # takes; the discriminator's under a periodic test stay gated
    assert sync_lines(GAN_STEP.format(rebinding="")) == [18]


def test_the_same_test_after_its_name_is_rebound_is_a_gate_again():
    rebound = GAN_STEP.format(rebinding="step = step // 2\n        ")
    assert sync_lines(rebound) == []


def test_a_device_tensor_as_a_slice_bound_is_read_on_the_host():
    # `x[:, :t]` turns a 0-dim tensor into an int with `__index__`: a host read; sizes, lengths kept
    # on the host and index tensors (`x[idx]`, gathered on the device) are not
    code = """
    import torch
    from torch import nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("r", torch.tensor(2))
            self.proj = nn.Linear(8, 8)

        def forward(self, mels, idx):
            n = mels.size(1)
            kept = mels[:, :n] + mels[idx]
            clipped = mels[:, : self.r]
            return self.proj(kept + clipped.sum())

    model = Decoder().cuda()
    for mels in loader:
        mels = mels.cuda()
        cutoff = torch.randint(1, mels.shape[1], (), device=mels.device)
        idx = torch.arange(4, device=mels.device)
        loss = model(mels[:, cutoff:], idx).mean()
        loss.backward()
        optimizer.step()
    """
    assert sorted(sync_lines(code)) == [14, 22]


def test_code_past_a_continue_of_its_block_never_runs():
    # a branch switched off by a `continue` above the code kept for later (a Darknet `region` layer)
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x), y)
        for kind in kinds:
            if kind == "region":
                continue
                aux = aux_loss(x)
                if aux.item() > 0:
                    loss = loss + aux
            elif kind == "yolo":
                loss = loss + yolo_loss(x)
        loss.backward()
        optimizer.step()
        print(loss.item())
        continue
        total += loss.item()
    """
    assert sync_lines(code) == [15]


def test_a_branch_a_constant_test_rules_out_never_runs():
    # a switch edited by hand (a script export's `if True:` keeping the greedy branch): the other branch
    # never runs; a name holding the constant is a switch the run may flip, and stays flagged
    code = """
    import torch
    use_teacher = True
    for x, y in loader:
        loss = criterion(model(x), y)
        if True:
            total = loss.detach()
        elif use_teacher:
            print(loss.item())
        else:
            total += loss.item()
        if 0:
            print(loss.item())
        if use_teacher:
            pass
        else:
            print(loss.item())
        loss.backward()
        optimizer.step()
    """
    assert sync_lines(code) == [17]


def test_code_past_a_conditional_continue_still_runs():
    code = """
    import torch
    for x, y in loader:
        if y is None:
            continue
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    """
    assert sync_lines(code) == [9]


NCE_MEMORY = """
import torch
from torch import nn


class NCEAverage(nn.Module):
    def __init__(self, size, K, T):
        super().__init__()
        self.register_buffer("params", torch.tensor([K, T, -1]))
        self.register_buffer("memory", torch.rand(size, 128))

    def forward(self, x, idx):
        Z = self.params[2].item()
        out = torch.exp(torch.mm(x, self.memory.t()) / self.params[1])
        if {test}:
            {assign}
            Z = self.params[2].clone().detach().item()
            print("normalization constant Z is set to {{:.1f}}".format(Z))
        return out / Z


model = nn.Linear(10, 128).cuda()
contrast = NCEAverage(1000, 4096, 0.07).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, idx in loader:
    out = contrast(model(x.cuda()), idx)
    loss = -out.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("test, found", [
    ("Z < 0", [13]), ("Z == -1", [13]), ("Z <= -1", [13]),
    ("self.params[2] < 0", [13, 15]),  # (the test itself reads the buffer on the device, every step)
])
def test_state_set_from_its_negative_starting_value_is_set_on_the_first_call_only(test, found):
    # `Z = self.params[2].item()` reads the buffer every step; the body, which replaces the sentinel
    # the buffer starts at with the value it keeps, runs once
    assert lines(NCE_MEMORY.format(test=test, assign="self.params[2] = out.mean() * 1000"), "TL401") == found


@pytest.mark.parametrize("test, assign", [
    ("Z < 0", "scale = out.mean() * 1000"),  # nothing of the object's state is set: a clamp, as often as it holds
    ("Z < 0.5", "self.params[2] = out.mean() * 1000"),  # a threshold, not the sentinel a value starts at
    ("Z > -1", "self.params[2] = out.mean() * 1000"),
])
def test_a_negative_test_that_sets_no_state_is_no_first_call_gate(test, assign):
    assert lines(NCE_MEMORY.format(test=test, assign=assign), "TL401") == [13, 17]


# rotary tables kept in zero-filled buffers, computed on the first forward (minimind's `freqs_cos`)
ROTARY_BUFFERS = """
import torch
from torch import nn


def tables(dim, end):
    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(end).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


class Model(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        self.dim, self.end = dim, end
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("freqs_cos", torch.zeros(end, dim // 2), persistent=False)
        self.register_buffer("freqs_sin", torch.zeros(end, dim // 2), persistent=False)

    def forward(self, x):
        if self.freqs_cos[0, 0] == 0:
            cos, sin = tables(self.dim, self.end)
            {kept} = cos.to(x.device), sin.to(x.device)
        return self.proj(x) * self.freqs_cos[: x.shape[1]].sum()


model = Model(64, 128).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    loss = model(x.cuda()).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("kept, moves", [
    ("self.freqs_cos, self.freqs_sin", []),  # the buffers replaced: non-zero from the second call on
    ("cos_here, sin_here", [23]),  # the buffer tested stays zero: computed and copied every step
])
def test_a_buffer_computed_on_the_first_call_from_its_zero_fill_is_computed_once(kept: str, moves: list[int]) -> None:
    code = ROTARY_BUFFERS.format(kept=kept)
    assert lines(code, "TL401") == [21]  # (the test reads the buffer on the device, every step)
    assert lines(code, "TL406") == moves


DIAGNOSTIC_BRANCH = """
import torch

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    out = model(x.cuda())
    loss = ((out - y.cuda()) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if {test}:
        show(out.detach().cpu().numpy())
"""


@pytest.mark.parametrize("test, found", [
    ("opt.debug > 0", []), ("args.verbose >= 2", []), ("self.opt.debug == 4", []),  # a level of debugging output
    ("opt.print_freq > 0", [13]),  # a setting that holds on every step of a run that prints
    ("opt.clip_val > 0", [13]),
])
def test_a_debugging_level_gates_what_it_shows_as_a_debug_flag_does(test, found):
    assert lines(DIAGNOSTIC_BRANCH.format(test=test), "TL401") == found


@pytest.mark.parametrize("test, found", [
    ("opt.test", []), ("self.opt.testing", []), ("args.test_mode", []),  # a run that only tests: no training step
    ("opt.latest", [13]),  # a word that merely contains "test": a run-wide switch, true on every step
    ("opt.save_results or opt.test", []),
])
def test_a_test_mode_flag_gates_what_a_shared_train_and_test_loop_saves(test, found):
    assert lines(DIAGNOSTIC_BRANCH.format(test=test), "TL401") == found


LOSS_WITH_EXTRAS = """
import torch

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = loss_fun(model(x.cuda()), y.cuda())
    loss_extra = None
    {unpack}
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if loss_extra:
        loss_extra = [one.item() for one in loss_extra]
"""


@pytest.mark.parametrize("unpack, found", [
    # what a loss returns besides a tensor, when it is a sequence: a list of tensors, tested by its length
    ("if isinstance(loss, (list, tuple)):\n        loss, loss_extra = loss", [15]),  # each `.item()`, not the `if`
    ("if not isinstance(loss, torch.Tensor):\n        loss, loss_extra = loss", [15]),
    ("loss, loss_extra = loss", [13]),  # unpacking a device tensor gives device tensors: the `if` reads one
    ("if isinstance(x, (list, tuple)):\n        loss, loss_extra = loss", [14]),  # another name was tested
])
def test_an_isinstance_test_for_a_sequence_unpacks_no_tensor(unpack, found):
    assert lines(LOSS_WITH_EXTRAS.format(unpack=unpack), "TL401") == found


COUNT_BESIDE_LOSS = """
from typing import Tuple

import torch

average_over = 0
for batch in loader:
    loss = model.forward_loss(batch)
    {test}
        average_over += loss[1]
        loss = loss[0]
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("test, found", [
    # flair's trainer: a model's forward_loss may give back the number of items with its loss
    ("if isinstance(loss, Tuple):", []),
    ("if isinstance(loss, (list, tuple)):", []),
    ("if loss.dim() > 0:", [10]),  # a row of the loss tensor: its graph is kept from step to step
])
def test_an_element_of_what_an_isinstance_test_calls_a_sequence_is_no_row_of_a_tensor(test, found):
    assert lines(COUNT_BESIDE_LOSS.format(test=test), "TL302") == found


OPTIMIZER_WRAPPER = """
import torch


class {name}:
    def __init__(self, optimizer, trust=0.001):
        self.optim = optimizer
        self.trust = trust

    def zero_grad(self):
        self.optim.zero_grad()

    def step(self):
        for group in self.optim.{groups}:
            for p in group["params"]:
                param_norm, grad_norm = torch.norm(p.data), torch.norm(p.grad.data)
                if param_norm != 0 and grad_norm != 0:
                    p.grad.data *= self.trust * param_norm / grad_norm
        self.optim.step()


model = torch.nn.Linear(4, 1).cuda()
optimizer = {name}(torch.optim.SGD(model.parameters(), lr=0.1))
for x in loader:
    loss = model(x.cuda()).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_an_optimizer_wrapper_of_its_own_reads_its_flags_as_an_optimizer_does():
    # a LARS wrapper (no base, no "Optimizer" in its name) steps over the wrapped optimizer's groups:
    # its norms' tests are the optimizer's implementation, as in torch's own optimizers
    assert lines(OPTIMIZER_WRAPPER.format(name="LARS", groups="param_groups"), "TL401") == []


def test_a_class_with_step_and_zero_grad_over_no_parameter_groups_is_no_optimizer():
    # (a trainer's own `step` over its batches, say): its tests of tensors are the loop's
    assert lines(OPTIMIZER_WRAPPER.format(name="LARS", groups="layers"), "TL401") == [17]


READ_IN_STEP = """
import torch

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    n = len(x)
    {statement}
"""


@pytest.mark.parametrize("statement, found", [
    ("pbar.set_postfix(loss='%.3f' % loss)", [12]),  # %-formatting converts the tensor, in any call's argument
    ("logger.info('loss %.3f lr %g' % (loss, 0.1))", [12]),
    ("pbar.set_postfix(step='%d' % step)", []),  # a number
    ("floor = max(torch.norm(loss) ** 2, 1e-6)", [12]),  # Python's max compares the tensor with the number
    ("floor = max(n, 1)", []),
])
def test_percent_formatting_and_builtin_max_read_a_tensor_argument(statement, found):
    assert lines(READ_IN_STEP.format(statement=statement), "TL401") == found


DETECTOR = """
import torch
from torch import nn


class Detector(nn.Module):
    def forward(self, images, targets=None):
        scores = self.head(images)
        print(scores.max().item())
        if self.training{extra}:
            return self.loss(scores, targets)
{inference}


model = Detector().cuda()
for images, targets in loader:
    loss = model(images.cuda(), targets)
    loss.backward()
    optimizer.step()
"""
ELSE_BRANCH = """        else:
            best = scores.argmax().item()
            return best
"""
AFTER_RETURN = """        best = scores.argmax().item()
        return best
"""
# speech-resynthesis' generator: `elif kwargs.get("dur_prediction", False):` after `if self.training:`
ELIF_BRANCHES = """        elif self.decode:
            best = scores.argmax().item()
            return best
        elif self.keep:
            return scores.max().item()
        else:
            return scores.argmin().item()
"""


@pytest.mark.parametrize("extra, inference, found", [
    ("", ELSE_BRANCH, [9]),  # the `else` of `if self.training:` is the inference path
    ("", AFTER_RETURN, [9]),  # so is what follows its early return
    (" and targets is not None", ELSE_BRANCH, [9, 13]),  # near miss: a training forward without targets takes it
    (" and targets is not None", AFTER_RETURN, [9, 12]),
    ("", ELIF_BRANCHES, [9]),  # each `elif` and the `else` after `if self.training:` are inference paths too
    (" and targets is not None", ELIF_BRANCHES, [9, 13, 16, 18]),
])
def test_the_inference_path_of_if_self_training_is_no_step(extra, inference, found):
    # pytorch-retinanet's shape: `if self.training: return self.focalLoss(...)`, `else:` decodes the
    # boxes with host reads; training steps never take that path. The read before the test is per step.
    assert lines(DETECTOR.format(extra=extra, inference=inference), "TL401") == found


LEGACY_STEP = """
import torch
model = torch.nn.Linear(4, 4).cuda()
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    out = model(x)
    loss = criterion(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    {statement}
"""


@pytest.mark.parametrize("statement, found", [
    ("total_loss += loss.data[0]", [11]),  # PyTorch 0.3's `.item()`
    ("losses.update(loss.data[0], x.size(0))", [11]),
    ("history.append(loss.data[0])", [11]),
    ("train_hist['D_losses'].append(loss.data[0])", [11]),  # appended to a list a dict holds
    ("save_image(out.data[0], 'sample.png')", []),  # near miss: the first image of the batch, a tensor
    ("first = out.data[0]", []),
    ("if step % 100 == 0: print(loss.data[0])", []),
])
def test_a_legacy_read_of_a_loss_is_a_host_read(statement, found):
    assert lines(LEGACY_STEP.format(statement=statement), "TL401") == found


TRAIN_OR_EVALUATE = """
import torch


def run_epoch(model, loader, optimizer, writer, is_train):
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        if is_train:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            writer.add_scalar("train_loss", loss.item(), step)
        else:
            writer.add_scalar("val_loss", loss.item(), step)


for epoch in range(10):
    run_epoch(model, train_loader, optimizer, writer, is_train=True)
    with torch.no_grad():
        run_epoch(model, val_loader, optimizer, writer, is_train=False)
"""


def test_the_evaluation_pass_of_a_function_that_trains_as_its_flag_says_is_no_training_step():
    assert lines(TRAIN_OR_EVALUATE, "TL401") == [12]
    negated = TRAIN_OR_EVALUATE.replace(
        '        else:\n            writer.add_scalar("val_loss", loss.item(), step)\n',
        '        if not is_train:\n            writer.add_scalar("val_loss", loss.item(), step)\n',
    )
    assert lines(negated, "TL401") == [12]


def test_a_flag_named_for_something_else_than_training_is_no_such_test():
    # `use_amp`, `train_loader`: what runs while they are false still runs on training steps
    for name in ("use_amp", "train_loader"):
        assert lines(TRAIN_OR_EVALUATE.replace("is_train", name), "TL401") == [12, 14]


SMOKE_TEST = """
import torch

if __name__ == "__main__":
    xyz = torch.randn(2, 9, 3).cuda().requires_grad_()
    module = torch.nn.Linear(3, 3).cuda()
    for _ in range(1):
        out = module(xyz)
        out.backward(torch.ones_like(out))
        print(out)
        print(xyz.grad)
"""


def test_a_one_round_loop_is_no_repeated_step():
    """The `__main__` smoke test of copied PointNet++ modules: `for _ in range(1):` backpropagates once,
    with no optimizer, so its prints run once, not every step. Near misses: two rounds repeat; a one-round
    loop inside a loop over batches runs once per round of that loop, which trains."""
    assert lines(SMOKE_TEST, "TL401") == []
    assert lines(SMOKE_TEST.replace("range(1)", "range(2)"), "TL401") == [10, 11]
    looped = SMOKE_TEST.replace("    for _ in range(1):\n", "    for batch in loader:\n        for _ in range(1):\n").replace(
        "        out = module(xyz)\n        out.backward(torch.ones_like(out))\n        print(out)\n        print(xyz.grad)\n",
        "            out = module(xyz)\n            out.backward(torch.ones_like(out))\n            print(out)\n            print(xyz.grad)\n")
    assert lines(looped, "TL401") == [11, 12]
