"""Positives as they appear in real code and near-miss negatives for TL101, TL202, TL301, TL401, TL403."""

from __future__ import annotations

from tests.helpers import lines, lint


# -- TL101 low-precision-params-trained -------------------------------------------------------
def test_tl101_cast_in_helper_function_with_alias_import():
    code = """
    import torch as T
    def build_model(cfg):
        model = GPT(cfg).to("cuda")
        model = model.to(dtype=T.bfloat16)
        return model

    def main():
        model = build_model(cfg)
        optimizer = T.optim.AdamW(model.parameters(), lr=3e-4)
    """
    found = lint(code, "TL101")
    assert [d.line for d in found] == [5]
    assert found[0].facts == {"dtype": "bfloat16", "optimizer": "AdamW", "lr": 3e-4}


def test_tl101_from_import_dtype_and_device_dtype_positional():
    code = """
    import torch
    from torch import float16
    net = Net().to("cuda", float16)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    """
    assert lines(code, "TL101") == [4]


def test_tl101_param_groups_built_from_the_model():
    code = """
    import torch
    model = Net().bfloat16()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=6e-4)
    """
    assert lines(code, "TL101") == [3]


def test_tl101_self_model_across_methods():
    code = """
    import torch
    class Trainer:
        def __init__(self, model):
            self.model = model.half()
        def configure(self):
            self.opt = torch.optim.Adam(self.model.parameters())
    """
    assert lines(code, "TL101") == [5]


def test_tl101_from_pretrained_full_finetune():
    code = """
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    """
    assert lines(code, "TL101") == [4]


def test_tl101_not_flagged_inference_only_or_other_module_or_aware_optimizer():
    code = """
    import torch
    from optimi import StableAdamW
    teacher = Teacher().to(torch.bfloat16).eval()
    student = Student()
    opt = torch.optim.AdamW(student.parameters(), lr=1e-4)
    model = Net().to(torch.bfloat16)
    opt2 = StableAdamW(model.parameters(), lr=1e-4, kahan_sum=True)
    x = batch.to(torch.bfloat16)
    """
    assert lines(code, "TL101") == []


def test_tl101_not_flagged_with_peft_or_frozen_base_loop():
    peft = """
    import torch
    from peft import LoraConfig, get_peft_model
    model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    frozen = """
    import torch
    model = Net().to(torch.bfloat16)
    for p in model.parameters():
        p.requires_grad = False
    model.add_adapters()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    """
    assert lines(peft, "TL101") == []
    assert lines(frozen, "TL101") == []


def test_tl101_string_dtype_to_is_not_a_cast():
    code = """
    import torch
    model = Net().to("cuda")
    optimizer = torch.optim.AdamW(model.parameters())
    """
    assert lines(code, "TL101") == []


# -- TL202 fp16-without-clipping ---------------------------------------------------------------
def test_tl202_cuda_amp_spellings():
    code = """
    from torch.cuda.amp import GradScaler, autocast
    scaler = GradScaler()
    for x, y in loader:
        with autocast():
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert lines(code, "TL202") == [3]


def test_tl202_autocast_cuda_default_dtype_is_fp16():
    code = """
    import torch
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
    """
    assert lines(code, "TL202") == [4]


def test_tl202_not_flagged_bf16_disabled_scaler_clip_elsewhere_or_no_backward():
    bf16_cpu = """
    import torch
    for x in loader:
        with torch.autocast("cpu"):
            loss = model(x)
        loss.backward()
        optimizer.step()
    """
    disabled = """
    import torch
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for x in loader:
        scaler.scale(model(x)).backward()
        scaler.step(optimizer)
    """
    helper_clip = """
    import torch
    def clip(model):
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x)).backward()
        scaler.unscale_(optimizer)
        clip(model)
        scaler.step(optimizer)
    """
    no_backward = """
    import torch
    def make_scaler():
        return torch.cuda.amp.GradScaler()
    """
    lightning_clipped = """
    import lightning as L
    trainer = L.Trainer(precision="16-mixed", gradient_clip_val=1.0)
    """
    for code in (bf16_cpu, disabled, helper_clip, no_backward, lightning_clipped):
        assert lines(code, "TL202") == [], code


# -- TL301 retain-graph-in-loop ----------------------------------------------------------------
def test_tl301_in_accumulation_and_in_called_function():
    code = """
    def step(loss):
        loss.backward(retain_graph=True)

    for i, x in enumerate(loader):
        loss = model(x)
        step(loss)
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert lines(code, "TL301") == [3]


def test_tl301_not_flagged_gan_or_non_literal_or_outside_loop():
    gan = """
    for real in loader:
        fake = G(z)
        d_loss = D(real) - D(fake)
        d_loss.backward(retain_graph=True)
        d_opt.step()
        g_loss = -D(fake)
        g_loss.backward()
        g_opt.step()
    """
    non_literal = """
    for x in loader:
        losses = model(x)
        for i, l in enumerate(losses):
            l.backward(retain_graph=i < len(losses) - 1)
        optimizer.step()
    """
    once = """
    loss = model(x)
    loss.backward(retain_graph=True)
    grads = [p.grad for p in model.parameters()]
    """
    create_graph = """
    import torch
    for x in loader:
        loss = model(x)
        g = torch.autograd.grad(loss, x, create_graph=True)[0]
        (loss + g.pow(2).sum()).backward()
        optimizer.step()
    """
    for code in (gan, non_literal, once, create_graph):
        assert lines(code, "TL301") == [], code


# -- TL401 host-sync-in-step (see also test_per_step_analysis) ---------------------------------
def test_tl401_print_and_fstring_of_tensor_and_cpu_of_model_not_flagged():
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        print(loss)
        logger.info(f"loss {loss:.4f} step {step}")
        model.cpu()
        print(step)
    """
    assert lines(code, "TL401") == [7, 8]


def test_tl401_accelerate_backward_is_a_step():
    code = """
    from accelerate import Accelerator
    accelerator = Accelerator()
    for batch in loader:
        outputs = model(**batch)
        accelerator.backward(outputs.loss)
        optimizer.step()
        losses.append(outputs.loss.detach().float().cpu().item())
    """
    assert lines(code, "TL401") == [8]


# -- TL403 memory-stats-in-step ----------------------------------------------------------------
def test_tl403_alias_and_from_import():
    code = """
    from torch.cuda import memory_summary, reset_peak_memory_stats as reset
    def train_step(batch):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        reset()
        print(memory_summary())
    """
    assert lines(code, "TL403") == [7, 8]


def test_tl403_gated_or_debug_flag_not_flagged():
    code = """
    import torch
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if DEBUG_MEMORY:
            torch.cuda.reset_peak_memory_stats()
        if step % 100 == 0:
            print(torch.cuda.memory_summary())
    """
    assert lines(code, "TL403") == []
