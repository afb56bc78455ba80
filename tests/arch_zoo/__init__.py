"""A zoo of architectures for placement statistics: torchvision-style vision
models written in torch (tests/arch_zoo/vision.py) and transformers models from tiny configs
(tests/arch_zoo/transformers_tiny.py), plus small models built around the ops the
legalising passes rewrite. ``ARCHITECTURES[name]()`` gives (module, example inputs, input names); nothing
is downloaded and every weight is random (torchvision's weights=None initialisation)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from tests.arch_zoo import vision as v
from tests.arch_zoo.transformers_tiny import BUILDERS

Built = tuple[torch.nn.Module, tuple[Any, ...], tuple[str, ...]]
IMAGE = 128  # input side of the vision models: every layer kept, compiles in seconds


def _vision(
    make: Callable[[], torch.nn.Module], size: int = IMAGE, channels: int = 3
) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        return v.init_like_torchvision(make()), (torch.randn(1, channels, size, size),), ("image",)

    return build


class EinsumAttention(torch.nn.Module):
    """Attention written with einsum (as in many diffusion and research codebases)."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.qkv, self.out, self.heads = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, w = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
        a = torch.einsum("bqhd,bkhd->bhqk", q, k).softmax(-1)
        return self.out(torch.einsum("bhqk,bkhd->bqhd", a, w).reshape(b, n, d))


class TimestepMLP(torch.nn.Module):
    """A diffusion timestep embedding (sin/cos of t * frequencies) and its MLP."""

    def __init__(self, d: int = 128) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.SiLU(), torch.nn.Linear(4 * d, d)
        )
        self.d = d

    def forward(self, t):
        freqs = torch.exp(-math.log(10000.0) * torch.arange(self.d // 2) / (self.d // 2))
        a = t[:, None] * freqs[None]
        return self.mlp(torch.cat([torch.sin(a), torch.cos(a)], -1))


class CumsumPool(torch.nn.Module):
    """Running means along a sequence (cumsum over time), then a ConvTranspose1d upsampler."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose1d(c, c, 4, 2, 1)

    def forward(self, x):
        n = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        return self.up(torch.cumsum(x, -1) / n)


def _custom(
    module: torch.nn.Module, *inputs: torch.Tensor, names: tuple[str, ...] = ("x",)
) -> Callable[[], Built]:
    return lambda: (module.eval(), inputs, names)


ARCHITECTURES: dict[str, Callable[[], Built]] = {
    "resnet18": _vision(lambda: v.ResNet(v.BasicBlock, [2, 2, 2, 2])),
    "resnet50": _vision(lambda: v.ResNet(v.Bottleneck, [3, 4, 6, 3])),
    "resnext50_32x4d": _vision(lambda: v.ResNet(v.ResNeXtBlock, [3, 4, 6, 3])),
    "wide_resnet50_2": _vision(lambda: v.ResNet(v.WideBlock, [3, 4, 6, 3])),
    "mobilenet_v2": _vision(v.MobileNetV2),
    "mobilenet_v3_small": _vision(v.MobileNetV3),
    "mobilenet_v3_large": _vision(lambda: v.MobileNetV3(v.V3_LARGE, 1280)),
    # VGG and AlexNet at torchvision's 224: their adaptive pools are then identities
    "vgg11": _vision(
        lambda: v.vgg([64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]), 224
    ),
    "vgg16_bn": _vision(
        lambda: v.vgg(
            [
                64,
                64,
                "M",
                128,
                128,
                "M",
                256,
                256,
                256,
                "M",
                512,
                512,
                512,
                "M",
                512,
                512,
                512,
                "M",
            ],
            bn=True,
        ),
        224,
    ),
    "alexnet": _vision(v.alexnet, 224),
    "squeezenet1_0": _vision(v.squeezenet),
    "densenet121": _vision(v.densenet),
    "shufflenet_v2": _vision(v.shufflenet_v2),
    "convnext_tiny": _vision(v.convnext),
    "efficientnet_b0": _vision(v.efficientnet_b0),
    "regnet_x_400mf": _vision(v.regnet_x_400mf),
    "unet": _vision(v.UNet, 64),
    "espcn_superres": _vision(v.SuperResolution, 64, 1),
    "yolo_style": _vision(v.Yolo),
    "einsum_attention": _custom(EinsumAttention(), torch.randn(1, 16, 64)),
    "timestep_mlp": _custom(TimestepMLP(), torch.tensor([500.0]), names=("t",)),
    "cumsum_upsampler": _custom(CumsumPool(), torch.randn(1, 32, 24)),
}
ARCHITECTURES |= {name: build for name, build in BUILDERS.items()}
