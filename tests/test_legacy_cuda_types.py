"""The legacy CUDA tensor types under a name of their own, as GAN and detection scripts of the
Variable era write them: `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, then
`Tensor(np.random.normal(...))` (a host array copied to the device) and `torch.zeros(...).type(Tensor)`
(a host tensor copied there) every step; `Tensor(n, 1).fill_(1.0)` allocates on the device, and
`imgs.type(Tensor)` moves the loader's batch (data), so neither is reported."""

from __future__ import annotations

from tests.helpers import lines

GAN = """
import numpy as np
import torch
from torch.autograd import Variable

cuda = torch.cuda.is_available()
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor


def train(generator, discriminator, dataloader, optimizer_G, adversarial_loss, latent_dim):
    for epoch in range(10):
        for i, (imgs, _) in enumerate(dataloader):
            valid = Variable(Tensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)
            real_imgs = Variable(imgs.type(Tensor))
            optimizer_G.zero_grad()
            z = Variable(Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim))))
            g_loss = adversarial_loss(discriminator(generator(z)), valid)
            g_loss.backward()
            optimizer_G.step()
            mask = torch.zeros(imgs.size(0), 4).type(Tensor)
            host = torch.zeros(imgs.size(0), 4).type(torch.FloatTensor)
"""


def test_a_named_cuda_type_given_numbers_or_a_host_tensor_is_a_copy_every_step() -> None:
    # (the script moves nothing with `.cuda()` or `.to()`: the rule must still look at it)
    assert lines(GAN, "TL406") == [16, 20]


def test_the_same_type_allocating_or_moving_the_batch_is_no_finding() -> None:
    # near misses: `Tensor(n, 1)` allocates on the device, `imgs.type(Tensor)` moves data,
    # `.type(torch.FloatTensor)` stays on the host; nothing of them is reported
    quiet = GAN.replace("Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))", "Tensor(imgs.size(0), latent_dim).normal_()")
    quiet = quiet.replace("torch.zeros(imgs.size(0), 4).type(Tensor)", "Tensor(imgs.size(0), 4).fill_(0)")
    assert lines(quiet, "TL406") == []


def test_the_host_type_under_a_name_is_no_copy() -> None:
    host = GAN.replace("torch.cuda.FloatTensor if cuda else torch.FloatTensor", "torch.FloatTensor")
    assert lines(host, "TL406") == []


def test_a_tensor_given_a_named_cuda_type_is_on_the_device() -> None:
    # `mask` lives on the device once `.type(Tensor)` copied it there: reading it waits for the GPU;
    # `host`, given the host type, does not
    read = GAN + "            print(mask.sum().item(), host.sum().item())\n"
    assert lines(read, "TL401") == [22]
    assert lines(read.replace("mask.sum().item(), ", ""), "TL401") == []


# a YOLO layer's loss (Variable-era detection code): the type chosen in `forward` by the input's device
YOLO_LAYER = """
import numpy as np
import torch
from torch import nn


class YOLOLayer(nn.Module):
    def __init__(self, anchors):
        super().__init__()
        self.conv = nn.Conv2d(256, 255, 1)
        self.anchors = anchors

    def forward(self, xin, labels):
        output = self.conv(xin)
        fsize = output.shape[2]
        dtype = torch.cuda.FloatTensor if xin.is_cuda else torch.FloatTensor
        x_shift = dtype(np.broadcast_to(np.arange(fsize, dtype=np.float32), output.shape[:4]))
        target = torch.zeros(output.shape[0], 3, fsize, fsize).type(dtype)
        truth = dtype(np.zeros((4, 4)))
        ious = truth.cpu()
        return ((output[..., 0] - x_shift) ** 2).sum() + target.sum() + ious.sum()


def train(loader):
    model = YOLOLayer([10, 13]).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for imgs, labels in loader:
        loss = model(imgs.cuda(), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_type_chosen_in_the_function_by_the_input_device_copies_every_step() -> None:
    assert lines(YOLO_LAYER, "TL406") == [17, 18, 19]
    assert lines(YOLO_LAYER, "TL401") == [20]  # `truth` lives on the device: `.cpu()` waits for it


def test_a_type_an_object_keeps_copies_every_step() -> None:
    # pix2pixHD and SPADE keep the type on `self`, chosen in `__init__` by the GPUs given
    kept = YOLO_LAYER.replace("        self.anchors = anchors\n", "        self.anchors = anchors\n        self.Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.Tensor\n")
    kept = kept.replace("        dtype = torch.cuda.FloatTensor if xin.is_cuda else torch.FloatTensor\n", "        dtype = self.Tensor\n")
    assert lines(kept, "TL406") == [18, 19, 20]
    # near miss: a type that is the host's on both arms copies nothing
    host = YOLO_LAYER.replace("torch.cuda.FloatTensor if xin.is_cuda else torch.FloatTensor", "torch.DoubleTensor if xin.is_cuda else torch.FloatTensor")
    assert lines(host, "TL406") == []


HOST_TYPE = """
import torch


def train(model, loader, optimizer):
    model = model.cuda()
    for inputs, mask in loader:
        inputs = inputs.type(torch.FloatTensor)
        inputs, mask = inputs.cuda(), mask.cuda()
        out = model(inputs)
        weights = mask.type(torch.FloatTensor).cuda()
        loss = (out * weights).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_a_device_tensor_given_the_host_s_type_is_copied_to_the_host() -> None:
    # `.type(torch.FloatTensor)` of the moved mask copies it back (then `.cuda()` again); of the
    # loader's batch, before the move, it only casts on the host
    assert lines(HOST_TYPE, "TL401") == [11]
