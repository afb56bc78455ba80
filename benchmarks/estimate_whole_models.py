"""Whole-model estimates against every published whole-model latency found (checks, never fitted).

The cost model is calibrated on per-op and per-layer measurements only (calibration.json's
anchors); the figures here are whole models, each rebuilt in torch with the published
architecture and input (random weights: latency does not depend on weight values) and
estimated for the chip it was measured on. Per-layer measurements from the same harnesses
(level "layers") sit beside them: the four the cost model is fit on are marked calibration,
the rest are checks that show where a whole model's time goes. Writes ``benchmarks/results/estimate_whole_models.json``
and prints a Markdown table.

    python benchmarks/estimate_whole_models.py

``python benchmarks/estimate_whole_models.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import warnings
from pathlib import Path

from _common import add_smoke, results_path, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the architectures live in tests/arch_zoo

import torch  # noqa: E402

from anekit.compiler import compile as compile_model  # noqa: E402
from anekit.cost import estimate_compiled  # noqa: E402
from anekit.frontend.torch import from_torch  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "estimate_whole_models.json"
GOAL = 0.25
ANEFORGE_M5PRO = (
    "[aneforge] README 'Measured' table = bench/results/device_compare_wattcomplete_results_M5.json "
    "(M5 Pro): end-to-end Python call, minimum of 12-15 repetitions after 4-5 warm-ups, fp16 on "
    "the engine, batch 1"
)
ANEFORGE_M1 = (
    "[aneforge] bench/results/device_compare_wattcomplete_results_M1.json (an M1; the variant is "
    "not named; torchvision and transformers were absent, so it has no whole models): the same "
    "harness as the M5 Pro table"
)
ANEFORGE_M2 = (
    "[aneforge] bench/results/device_compare_wattcomplete_results_M2.json (an M2; the variant is "
    "not named, every M2 has the same 16-core engine): the same harness as the M5 Pro table"
)
MINILM_SENTENCE = "The Apple Neural Engine is a specialized accelerator for matrix math."
MINILM_TOKENS = 14  # [CLS] + 12 WordPiece tokens of MINILM_SENTENCE (all whole words) + [SEP]


def resnet(depths, block):
    from tests.arch_zoo import vision as v

    net = v.init_like_torchvision(v.ResNet(getattr(v, block), depths))
    return net, (torch.randn(1, 3, 224, 224),), ["image"]


def vit_b16():
    """torchvision's vit_b_16 as ANEForge runs it: 12 layers, final layer norm, head on the CLS row."""
    from tests.arch_zoo.transformers_tiny import Wrap
    from transformers import ViTConfig, ViTForImageClassification

    model = ViTForImageClassification(ViTConfig(num_labels=1000)).eval()
    return Wrap(model, ("pixel_values",)), (torch.randn(1, 3, 224, 224),), ["pixel_values"]


class L2Normalise(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.normalize(x, dim=-1)


def minilm():
    """ANEForge's af.load encoder call: two programs, the 6-layer encoder on the sentence's
    tokens (no padding) and, after the host's mean pooling, a [1, 384] L2 normaliser."""
    from tests.arch_zoo.transformers_tiny import Wrap
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
    )
    ids = torch.arange(MINILM_TOKENS, dtype=torch.int64)[None] + 1000
    encoder = Wrap(BertModel(cfg, add_pooling_layer=False).eval(), ("input_ids",))
    return [(encoder, (ids,), ["input_ids"]), (L2Normalise(), (torch.randn(1, 384),), ["v"])]


def conv_stack():
    """ANEForge's 'conv resnet-ish': 16 chained 3x3 convolutions with ReLU, 64 -> 256 channels, 32x32."""
    layers: list[torch.nn.Module] = []
    for d in range(16):
        layers += [
            torch.nn.Conv2d(64 if d == 0 else 256, 256, 3, padding=1, bias=False),
            torch.nn.ReLU(),
        ]
    return torch.nn.Sequential(*layers).eval(), (torch.randn(1, 64, 32, 32),), ["x"]


def neck_block(channels, size):
    """ANEForge's below-ridge neck block: conv 1x1, group norm (32 groups), GELU, GELU, one program."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(channels, channels, 1, bias=False), torch.nn.GroupNorm(32, channels),
        torch.nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh"),
    ).eval()  # fmt: skip
    return net, (torch.randn(1, channels, size, size),), ["x"]


class Attention(torch.nn.Module):
    """ANEForge's af.mha at ViT's shape: q, k, v and output projections with bias, 12 heads."""

    def __init__(self, dim=768, heads=12):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        s, d = x.shape
        split = lambda t: t.reshape(s, self.heads, d // self.heads).transpose(0, 1)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        a = torch.softmax(q @ k.transpose(1, 2) / (d // self.heads) ** 0.5, dim=-1)
        return self.o((a @ v).transpose(0, 1).reshape(s, d))


def attention():
    return Attention().eval(), (torch.randn(197, 768),), ["x"]


def layer_norm():
    return torch.nn.LayerNorm(768).eval(), (torch.randn(197, 768),), ["x"]


class RMSNorm(torch.nn.Module):
    """af rms_norm: x / sqrt(mean(x^2) + eps) * gain over the last axis."""

    def __init__(self, dim):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.gain


def gemm(m, k, n):
    """The harness's GEMM rows: af.input((M, K)).linear(W) with W [N, K], no bias."""
    return torch.nn.Linear(k, n, bias=False).eval(), (torch.randn(m, k),), ["x"]


def conv_single():
    """'conv single': one 3x3 convolution 16 -> 64 channels on 32x32 with ReLU."""
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 64, 3, padding=1, bias=False), torch.nn.ReLU())
    return net.eval(), (torch.randn(1, 16, 32, 32),), ["x"]


def stencil():
    """'stencil 5pt': 32 chained one-channel 3x3 convolutions (a heat-equation step) on 256x256."""
    net = torch.nn.Sequential(*(torch.nn.Conv2d(1, 1, 3, padding=1, bias=False) for _ in range(32)))
    return net.eval(), (torch.randn(1, 1, 256, 256),), ["x"]


def rms_norm():
    return RMSNorm(768).eval(), (torch.randn(197, 768),), ["x"]


def group_norm():
    return torch.nn.GroupNorm(32, 256).eval(), (torch.randn(1, 256, 64, 64),), ["x"]


class Jacobi(torch.nn.Module):
    """'Jacobi solve': iters x (x <- (b - x R^T) * d) with a constant R, one program."""

    def __init__(self, n=512, iters=25):
        super().__init__()
        self.iters = iters
        self.r = torch.nn.Linear(n, n, bias=False)

    def forward(self, x, b, d):
        for _ in range(self.iters):
            x = (b - self.r(x)) * d
        return x


def jacobi():
    return Jacobi().eval(), tuple(torch.randn(1, 512) for _ in range(3)), ["x", "b", "d"]


def attention_long():
    return Attention().eval(), (torch.randn(512, 768),), ["x"]


# (id, level, model builder, chip, published ms (low, high), role, source, note)
FIGURES = (
    ("resnet18-m5pro", "model", lambda: resnet([2, 2, 2, 2], "BasicBlock"), "m5-pro", (0.330, 0.330), "check",
     ANEFORGE_M5PRO + ": ResNet-18 0.330 ms (af.load_resnet18, BN folded, fp32 1x3x224x224 input)", ""),
    ("vit-b16-m5pro", "model", vit_b16, "m5-pro", (18.34, 18.34), "check",
     ANEFORGE_M5PRO + ": ViT-B/16 18.34 ms (examples/vit.py: 12 layers, final norm and head on the "
     "CLS row, one program; the CLS token and position table fed as inputs)", ""),
    ("minilm-l6-m5pro", "model", minilm, "m5-pro", (0.525, 0.525), "check",
     ANEFORGE_M5PRO + f": MiniLM encoder 0.525 ms for '{MINILM_SENTENCE}' (af.load; the call "
     "includes tokenising, mean pooling and L2 norm on the CPU)",
     f"all-MiniLM-L6-v2's architecture (BERT 384 wide, 6 layers, 12 heads) on {MINILM_TOKENS} "
     "tokens (the sentence tokenised by hand) and the second program ANEForge runs, the L2 "
     "normaliser (aneforge/models.py: Encoder); tokenising and mean pooling on the host are "
     "not modelled"),
    ("resnet50-mlperf-m5pro", "model", lambda: resnet([3, 4, 6, 3], "Bottleneck"), "m5-pro", (0.771, 0.776), "check",
     "[aneforge] bench/mlperf README and resnet50.py: torchvision ResNet-50 through ONNX, one program, "
     "fp16 [1,3,224,224] input, SingleStream p90 0.771 ms (LoadGen-shaped harness) and 0.773 / "
     "0.776 ms (real MLCommons LoadGen); the timed call includes the argmax on the CPU", ""),
    ("resnet18-m2", "model", lambda: resnet([2, 2, 2, 2], "BasicBlock"), "m2", (1.064, 1.064), "check",
     ANEFORGE_M2 + ": ResNet-18 1.064 ms", ""),
    ("vit-b16-m2", "model", vit_b16, "m2", (21.34, 21.34), "check",
     ANEFORGE_M2 + ": ViT-B/16 21.34 ms", ""),
    ("minilm-l6-m2", "model", minilm, "m2", (1.753, 1.753), "check",
     ANEFORGE_M2 + ": MiniLM encoder 1.753 ms", "as minilm-l6-m5pro"),
    ("conv-stack-m5pro", "layers", conv_stack, "m5-pro", (0.757, 0.757), "calibration",
     ANEFORGE_M5PRO + ": 'conv resnet-ish', 18.42 GFLOP in 0.757 ms",
     "chips.json m5-pro perf.peak_fp16_tflops is fit on it"),
    ("neck-256-m5pro", "layers", lambda: neck_block(256, 32), "m5-pro", (0.1403, 0.1403), "calibration",
     "[aneforge] bench/results/below_ridge_fusion.json (M5 Pro, fp16 input): fused neck block C=256 "
     "32x32 in 0.140 ms", "calibration.json planar_onchip_elements_per_s is fit on it"),
    ("neck-512-m5pro", "layers", lambda: neck_block(512, 16), "m5-pro", (0.3313, 0.3313), "check",
     "[aneforge] bench/results/below_ridge_fusion.json: fused neck block C=512 16x16 in 0.331 ms", ""),
    ("attention-vit-m5pro", "layers", attention, "m5-pro", (0.230, 0.230), "check",
     ANEFORGE_M5PRO + ": 'attention vit' (S=197, D=768, 12 heads, af.mha) 0.230 ms", ""),
    ("layer-norm-vit-m5pro", "layers", layer_norm, "m5-pro", (0.195, 0.195), "check",
     ANEFORGE_M5PRO + ": 'layer_norm vit' (197, 768) 0.195 ms", ""),
    ("conv-stack-m2", "layers", conv_stack, "m2", (1.265, 1.265), "check",
     ANEFORGE_M2 + ": 'conv resnet-ish' 1.265 ms", ""),
    ("attention-vit-m2", "layers", attention, "m2", (0.589, 0.589), "check",
     ANEFORGE_M2 + ": 'attention vit' 0.589 ms", ""),
    ("layer-norm-vit-m2", "layers", layer_norm, "m2", (0.283, 0.283), "check",
     ANEFORGE_M2 + ": 'layer_norm vit' 0.283 ms",
     "with the M5 Pro row, a check of planar_scaling (planar rate x peak / M5 Pro peak)"),
    ("gemm-floor-m5pro", "layers", lambda: gemm(64, 256, 256), "m5-pro", (0.0917, 0.0917), "check",
     ANEFORGE_M5PRO + ": 'GEMM floor (M=64, K=256, N=256)' 0.0917 ms", ""),
    ("gemm-floor-m2", "layers", lambda: gemm(64, 256, 256), "m2", (0.1099, 0.1099), "check",
     ANEFORGE_M2 + ": 'GEMM floor (M=64, K=256, N=256)' 0.1099 ms", ""),
    ("gemm-bandwidth-m5pro", "layers", lambda: gemm(128, 1024, 1024), "m5-pro", (0.0858, 0.0858), "check",
     ANEFORGE_M5PRO + ": 'GEMM bandwidth (M=128, K=1024, N=1024)' 0.0858 ms", ""),
    ("gemm-bandwidth-m2", "layers", lambda: gemm(128, 1024, 1024), "m2", (0.1351, 0.1351), "check",
     ANEFORGE_M2 + ": 'GEMM bandwidth (M=128, K=1024, N=1024)' 0.1351 ms", ""),
    ("gemm-compute-m5pro", "layers", lambda: gemm(256, 4096, 4096), "m5-pro", (1.2927, 1.2927), "check",
     ANEFORGE_M5PRO + ": 'GEMM compute (M=256, K=4096, N=4096)' 1.2927 ms", ""),
    ("gemm-compute-m2", "layers", lambda: gemm(256, 4096, 4096), "m2", (2.0434, 2.0434), "calibration",
     ANEFORGE_M2 + ": 'GEMM compute (M=256, K=4096, N=4096)' 2.0434 ms",
     "chips.json m2 perf.gemm_fp16_tflops is fit on it"),
    ("conv-single-m5pro", "layers", conv_single, "m5-pro", (0.1028, 0.1028), "check",
     ANEFORGE_M5PRO + ": 'conv single (16 -> 64 channels, 32x32, 3x3, ReLU)' 0.1028 ms", ""),
    ("conv-single-m2", "layers", conv_single, "m2", (0.1068, 0.1068), "check",
     ANEFORGE_M2 + ": 'conv single (16 -> 64 channels, 32x32, 3x3, ReLU)' 0.1068 ms", ""),
    ("stencil-m5pro", "layers", stencil, "m5-pro", (0.1275, 0.1275), "check",
     ANEFORGE_M5PRO + ": 'stencil 5pt (256x256, 32 steps: 32 chained one-channel 3x3 convolutions)' 0.1275 ms", ""),
    ("stencil-m2", "layers", stencil, "m2", (0.3714, 0.3714), "check",
     ANEFORGE_M2 + ": 'stencil 5pt (256x256, 32 steps: 32 chained one-channel 3x3 convolutions)' 0.3714 ms", ""),
    ("attention-long-m5pro", "layers", attention_long, "m5-pro", (0.8167, 0.8167), "check",
     ANEFORGE_M5PRO + ": 'attention longseq (S=512, D=768, 12 heads, af.mha)' 0.8167 ms", ""),
    ("attention-long-m2", "layers", attention_long, "m2", (1.2529, 1.2529), "check",
     ANEFORGE_M2 + ": 'attention longseq (S=512, D=768, 12 heads, af.mha)' 1.2529 ms", ""),
    ("rms-norm-vit-m5pro", "layers", rms_norm, "m5-pro", (0.3727, 0.3727), "check",
     ANEFORGE_M5PRO + ": 'rms_norm vit (197, 768)' 0.3727 ms", ""),
    ("rms-norm-vit-m2", "layers", rms_norm, "m2", (1.0796, 1.0796), "check",
     ANEFORGE_M2 + ": 'rms_norm vit (197, 768)' 1.0796 ms", ""),
    ("group-norm-fmap-m5pro", "layers", group_norm, "m5-pro", (0.3496, 0.3496), "check",
     ANEFORGE_M5PRO + ": 'group_norm fmap (1, 256, 64, 64), 32 groups' 0.3496 ms", ""),
    ("group-norm-fmap-m2", "layers", group_norm, "m2", (0.6785, 0.6785), "check",
     ANEFORGE_M2 + ": 'group_norm fmap (1, 256, 64, 64), 32 groups' 0.6785 ms", ""),
    ("gemm-floor-m1", "layers", lambda: gemm(64, 256, 256), "m1", (0.1644, 0.1644), "check",
     ANEFORGE_M1 + ": 'GEMM floor (M=64, K=256, N=256)' 0.1644 ms", ""),
    ("gemm-bandwidth-m1", "layers", lambda: gemm(128, 1024, 1024), "m1", (0.4055, 0.4055), "check",
     ANEFORGE_M1 + ": 'GEMM bandwidth (M=128, K=1024, N=1024)' 0.4055 ms", ""),
    ("gemm-compute-m1", "layers", lambda: gemm(256, 4096, 4096), "m1", (2.3944, 2.3944), "calibration",
     ANEFORGE_M1 + ": 'GEMM compute (M=256, K=4096, N=4096)' 2.3944 ms",
     "chips.json m1 perf.gemm_fp16_tflops is fit on it"),
    ("conv-single-m1", "layers", conv_single, "m1", (0.1914, 0.1914), "check",
     ANEFORGE_M1 + ": 'conv single (16 -> 64 channels, 32x32, 3x3, ReLU)' 0.1914 ms", ""),
    ("conv-stack-m1", "layers", conv_stack, "m1", (1.9184, 1.9184), "check",
     ANEFORGE_M1 + ": 'conv resnet-ish' 1.9184 ms", ""),
    ("attention-vit-m1", "layers", attention, "m1", (0.6128, 0.6128), "check",
     ANEFORGE_M1 + ": 'attention vit (S=197, D=768, 12 heads, af.mha)' 0.6128 ms", ""),
    ("attention-long-m1", "layers", attention_long, "m1", (1.8146, 1.8146), "check",
     ANEFORGE_M1 + ": 'attention longseq (S=512, D=768, 12 heads, af.mha)' 1.8146 ms", ""),
    ("layer-norm-vit-m1", "layers", layer_norm, "m1", (0.3214, 0.3214), "check",
     ANEFORGE_M1 + ": 'layer_norm vit (197, 768)' 0.3214 ms", ""),
    ("rms-norm-vit-m1", "layers", rms_norm, "m1", (1.3109, 1.3109), "check",
     ANEFORGE_M1 + ": 'rms_norm vit (197, 768)' 1.3109 ms", ""),
    ("group-norm-fmap-m1", "layers", group_norm, "m1", (1.025, 1.025), "check",
     ANEFORGE_M1 + ": 'group_norm fmap (1, 256, 64, 64), 32 groups' 1.025 ms", ""),
    ("stencil-m1", "layers", stencil, "m1", (0.2227, 0.2227), "check",
     ANEFORGE_M1 + ": 'stencil 5pt (256x256, 32 steps: 32 chained one-channel 3x3 convolutions)' 0.2227 ms", ""),
    ("jacobi-m5pro", "layers", jacobi, "m5-pro", (0.1699, 0.1699), "check",
     ANEFORGE_M5PRO + ": 'Jacobi solve (n=512, iters=25)': 25 chained (b - x.linear(R)) * d steps, R 512x512, one program, 0.1699 ms",
     "75 small chained layers: what a call costs beyond its floor when every layer is tiny"),
    ("jacobi-m2", "layers", jacobi, "m2", (0.3532, 0.3532), "check",
     ANEFORGE_M2 + ": 'Jacobi solve (n=512, iters=25)' 0.3532 ms", ""),
    ("jacobi-m1", "layers", jacobi, "m1", (0.4479, 0.4479), "check",
     ANEFORGE_M1 + ": 'Jacobi solve (n=512, iters=25)' 0.4479 ms", ""),
)  # fmt: skip
# The device-comparison files time each call twice: latency_ms is the minimum of 12-30 calls
# right after 3-8 warm-ups (the figure quoted above), energy.<device>.iter_ms the mean over a
# 6 s loop of the same call run back to back while powermetrics samples. On the M5 Pro (run in
# high-power mode) the two agree within 2-5%; on the M2 the short burst is often the slower one
# (ResNet-18 1.064 vs 0.629 ms, MiniLM 1.753 vs 0.804, attention 0.589 vs 0.395, and in the same
# file rms_norm 1.080 vs 0.597, stencil 0.371 vs 0.238), which a minimum can only be if the engine
# ran on a lower clock state during the burst. Both are the publisher's measurements of the same
# program; the published range spans them. (iter_ms of the 'ANE' energy entry, same files.)
SUSTAINED_MS = {
    "resnet18-m5pro": 0.3369, "vit-b16-m5pro": 18.450, "minilm-l6-m5pro": 0.5361,
    "resnet18-m2": 0.6287, "vit-b16-m2": 21.614, "minilm-l6-m2": 0.8039,
    "conv-stack-m5pro": 0.7952, "attention-vit-m5pro": 0.2361, "layer-norm-vit-m5pro": 0.2105,
    "conv-stack-m2": 1.2626, "attention-vit-m2": 0.3953, "layer-norm-vit-m2": 0.3268,
    "gemm-floor-m5pro": 0.1820, "gemm-bandwidth-m5pro": 0.1064, "gemm-compute-m5pro": 1.3138,
    "conv-single-m5pro": 0.1285, "stencil-m5pro": 0.1340, "attention-long-m5pro": 0.8332,
    "rms-norm-vit-m5pro": 0.3911, "group-norm-fmap-m5pro": 0.3659,
    "gemm-floor-m2": 0.2756, "gemm-bandwidth-m2": 0.1615, "gemm-compute-m2": 1.9796,
    "conv-single-m2": 0.2568, "stencil-m2": 0.2385, "attention-long-m2": 1.2265,
    "rms-norm-vit-m2": 0.5968, "group-norm-fmap-m2": 0.4752,
    "gemm-floor-m1": 0.197, "gemm-bandwidth-m1": 0.2972, "gemm-compute-m1": 2.5095, "conv-single-m1": 0.207, "conv-stack-m1": 2.0513, "attention-vit-m1": 0.632, "attention-long-m1": 1.671, "layer-norm-vit-m1": 0.3795, "rms-norm-vit-m1": 0.6864, "group-norm-fmap-m1": 0.6456, "stencil-m1": 0.2502,
    "jacobi-m5pro": 0.1727, "jacobi-m2": 0.3776, "jacobi-m1": 0.4812,
}  # fmt: skip
NOT_RECONSTRUCTED = (
    {"figure": "[seed001] Orion: GPT-2 124M decode 5.76 ms/token on an M4 Max",
     "why": "not rebuilt: Orion runs one program per layer and spends ~2.3 ms of the 5.76 ms in "
            "IOSurface round trips ([seed001] section 8.1), a runtime's dispatch pattern anekit's "
            "single-segment compile does not reproduce. (chips.json once derived the M4 "
            "ane_bandwidth_gbps from this figure; it now comes from ANEMLL-Bench's M4 run.)"},
    {"figure": "[aneforge] bench/mlperf README: Qwen3-0.6B decode, fp16, TPOT ~18.7 ms/token",
     "why": "a decode step with a resident KV cache (share_buffer) on ANEForge's own LLM "
            "lowering; not rebuilt here (0.6 B parameters of random weights to export)"},
    {"figure": "[aneforge] README: Stable Diffusion 1.5 U-Net and VAE",
     "why": "no latency is published, only fidelity"},
)  # fmt: skip


def error(value: float, low: float, high: float) -> float:
    """Signed relative distance from the published range (0 inside it)."""
    if value < low:
        return (value - low) / low
    if value > high:
        return (value - high) / high
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_smoke(parser)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    # smoke: one layer-level figure and one two-program figure, the same estimate path
    smoke = ("layer-norm-vit-m1", "attention-vit-m1")
    figures = [f for f in FIGURES if f[0] in smoke] if args.smoke else FIGURES
    torch.manual_seed(0)
    rows = []
    print("| figure | level | chip | published | estimate | error | role | bound |")
    print("|---|---|---|---|---|---|---|---|")
    for fid, level, build, chip, (low, high), role, source, note in figures:
        built = build()
        programs = built if isinstance(built, list) else [built]  # run one after another
        compiled = [compile_model(from_torch(*p), chip) for p in programs]
        ests = [estimate_compiled(cm) for cm in compiled]
        total_ms = sum(e.total_ms for e in ests)
        quoted = (low, high)
        if fid in SUSTAINED_MS:
            low, high = min(low, SUSTAINED_MS[fid]), max(high, SUSTAINED_MS[fid])
        err = error(total_ms, low, high)
        rows.append(
            {"id": fid, "level": level, "chip": chip, "published_ms": [low, high], "estimate_ms": total_ms,
             "error": err, "within_goal": abs(err) <= GOAL, "role": role, "bound": ests[0].bottleneck,
             "quoted_ms": list(quoted), "error_vs_quoted": error(total_ms, *quoted),
             "sustained_ms": SUSTAINED_MS.get(fid),
             "programs": len(compiled),
             "engine_layers": sum(cm.summary["engine_layers"] for cm in compiled),
             "cpu_ops": sum(cm.summary["cpu_ops"] for cm in compiled),
             "dispatches": sum(e.dispatches for e in ests), "source": source, "note": note}
        )  # fmt: skip
        published = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        print(
            f"| {fid} | {level} | {chip} | {published} ms | {total_ms:.3g} ms | {err:+.0%} | {role} | {ests[0].bottleneck} |",
            flush=True,
        )
    checks = [r for r in rows if r["role"] == "check" and r["level"] == "model"]
    write_json(
        results_path(args.output, args.smoke),
        {
            "benchmark": "estimate_whole_models",
            "goal": f"every whole-model check within {GOAL:.0%}",
            "checks_within_goal": sum(r["within_goal"] for r in checks),
            "checks": len(checks),
            "figures": rows,
            "not_reconstructed": list(NOT_RECONSTRUCTED),
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "load_average": os.getloadavg(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
