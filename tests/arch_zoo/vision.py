"""torchvision-style architectures written in torch (this machine has no CPU build of
torchvision): the same layer sequences and torchvision's weights=None initialisation
(kaiming-normal fan-out convolutions, unit BatchNorm, normal(0, 0.01) linear layers), at
reduced width/depth where noted so a whole zoo compiles in minutes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def init_like_torchvision(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d | nn.GroupNorm | nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model.eval()


def cbr(
    cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act: Any = nn.ReLU
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --- ResNet ------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, c: int, s: int) -> None:
        super().__init__()
        self.body = nn.Sequential(cbr(cin, c, 3, s), cbr(c, c, 3, 1, act=None))
        self.down = cbr(cin, c, 1, s, act=None) if s != 1 or cin != c else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.down(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, c: int, s: int, groups: int = 1, width: int | None = None) -> None:
        super().__init__()
        w = width or c
        self.body = nn.Sequential(
            cbr(cin, w, 1), cbr(w, w, 3, s, groups), cbr(w, c * 4, 1, act=None)
        )
        self.down = cbr(cin, c * 4, 1, s, act=None) if s != 1 or cin != c * 4 else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.down(x))


class ResNeXtBlock(Bottleneck):
    """torchvision's resnext50_32x4d bottleneck: 32 groups of width 4 per 64 channels."""

    def __init__(self, cin: int, c: int, s: int) -> None:
        super().__init__(cin, c, s, groups=32, width=c * 2)


class WideBlock(Bottleneck):
    """torchvision's wide_resnet50_2 bottleneck: twice the inner width."""

    def __init__(self, cin: int, c: int, s: int) -> None:
        super().__init__(cin, c, s, width=c * 2)


class ResNet(nn.Module):
    def __init__(
        self, block: Any, depths: list[int], width: int = 64, classes: int = 1000, **kw
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(cbr(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, d in enumerate(depths):
            c = width * 2**i
            for j in range(d):
                blk = block(cin, c, 2 if j == 0 and i > 0 else 1, **kw)
                layers.append(blk)
                cin = c * block.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --- MobileNet V2 / V3 --------------------------------------------------------------------


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, s) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(cbr(cin, exp, 1, act=act))
        layers.append(cbr(exp, exp, k, s, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, max(8, (exp // 4 + 4) // 8 * 8)))
        layers.append(cbr(exp, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.res = s == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y


# torchvision's mobilenet_v3_small settings: (kernel, expanded, out, SE, activation, stride)
V3_SMALL = [
    (3, 16, 16, True, nn.ReLU, 2), (3, 72, 24, False, nn.ReLU, 2), (3, 88, 24, False, nn.ReLU, 1),
    (5, 96, 40, True, nn.Hardswish, 2), (5, 240, 40, True, nn.Hardswish, 1),
    (5, 240, 40, True, nn.Hardswish, 1), (5, 120, 48, True, nn.Hardswish, 1),
    (5, 144, 48, True, nn.Hardswish, 1), (5, 288, 96, True, nn.Hardswish, 2),
    (5, 576, 96, True, nn.Hardswish, 1), (5, 576, 96, True, nn.Hardswish, 1),
]  # fmt: skip
V3_LARGE = [
    (3, 16, 16, False, nn.ReLU, 1), (3, 64, 24, False, nn.ReLU, 2), (3, 72, 24, False, nn.ReLU, 1),
    (5, 72, 40, True, nn.ReLU, 2), (5, 120, 40, True, nn.ReLU, 1), (5, 120, 40, True, nn.ReLU, 1),
    (3, 240, 80, False, nn.Hardswish, 2), (3, 200, 80, False, nn.Hardswish, 1),
    (3, 184, 80, False, nn.Hardswish, 1), (3, 184, 80, False, nn.Hardswish, 1),
    (3, 480, 112, True, nn.Hardswish, 1), (3, 672, 112, True, nn.Hardswish, 1),
    (5, 672, 160, True, nn.Hardswish, 2), (5, 960, 160, True, nn.Hardswish, 1),
    (5, 960, 160, True, nn.Hardswish, 1),
]  # fmt: skip


class MobileNetV3(nn.Module):
    def __init__(self, settings=V3_SMALL, last: int = 1024, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [cbr(3, 16, 3, 2, act=nn.Hardswish)]
        cin = 16
        for k, exp, cout, se, act, s in settings:
            layers.append(InvertedResidual(cin, k, exp, cout, se, act, s))
            cin = cout
        layers.append(cbr(cin, cin * 6, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(cin * 6, last), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(last, classes)
        )

    def forward(self, x):
        x = torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1)
        return self.classifier(x)


V2 = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [cbr(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in V2:
            for i in range(n):
                layers.append(
                    InvertedResidual(cin, 3, cin * t, c, False, nn.ReLU6, s if i == 0 else 1)
                )
                cin = c
        layers.append(cbr(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- VGG, AlexNet, SqueezeNet, DenseNet, ShuffleNet, ConvNeXt, EfficientNet, RegNet -------


def vgg(cfg: list[Any], classes: int = 1000, bn: bool = False) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += (
                [nn.Conv2d(cin, v, 3, padding=1)]
                + ([nn.BatchNorm2d(v)] if bn else [])
                + [nn.ReLU()]
            )
            cin = v
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(7), nn.Flatten(),
        nn.Linear(cin * 49, 1024), nn.ReLU(), nn.Linear(1024, classes),
    )  # fmt: skip


def alexnet(classes: int = 1000) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d(6), nn.Flatten(), nn.Linear(256 * 36, 1024), nn.ReLU(),
        nn.Linear(1024, classes),
    )  # fmt: skip


class Fire(nn.Module):
    def __init__(self, cin: int, s: int, e: int) -> None:
        super().__init__()
        self.sq, self.e1, self.e3 = (
            nn.Conv2d(cin, s, 1),
            nn.Conv2d(s, e, 1),
            nn.Conv2d(s, e, 3, padding=1),
        )

    def forward(self, x):
        x = F.relu(self.sq(x))
        return torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)


def squeezenet(classes: int = 1000) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
        Fire(64, 16, 64), Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
        Fire(128, 32, 128), Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
        Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), Fire(512, 64, 256),
        nn.Conv2d(512, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )  # fmt: skip


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
        )  # fmt: skip

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet(blocks=(6, 12, 24, 16), growth: int = 32, classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [cbr(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for i, n in enumerate(blocks):
        for _ in range(n):
            layers.append(DenseLayer(c, growth))
            c += growth
        if i < len(blocks) - 1:
            layers += [
                nn.BatchNorm2d(c),
                nn.ReLU(),
                nn.Conv2d(c, c // 2, 1, bias=False),
                nn.AvgPool2d(2),
            ]
            c //= 2
    return nn.Sequential(
        *layers,
        nn.BatchNorm2d(c),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c, classes),
    )


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, s: int) -> None:
        super().__init__()
        b = cout // 2
        self.s = s
        if s > 1:
            self.left = nn.Sequential(cbr(cin, cin, 3, s, groups=cin, act=None), cbr(cin, b, 1))
        self.right = nn.Sequential(
            cbr(cin if s > 1 else b, b, 1), cbr(b, b, 3, s, groups=b, act=None), cbr(b, b, 1)
        )

    def forward(self, x):
        if self.s == 1:
            a, b = x.chunk(2, 1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


def shufflenet_v2(widths=(116, 232, 464), repeats=(4, 8, 4), classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [cbr(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 24
    for w, r in zip(widths, repeats, strict=True):
        for i in range(r):
            layers.append(ShuffleUnit(cin, w, 2 if i == 0 else 1))
            cin = w
    return nn.Sequential(
        *layers, cbr(cin, 1024, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, classes)
    )


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 1e-6))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


def convnext(dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0])]
    for i, (d, n) in enumerate(zip(dims, depths, strict=True)):
        if i:
            layers += [LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)]
        layers += [ConvNeXtBlock(d) for _ in range(n)]
    return nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.LayerNorm(dims[-1]),
        nn.Linear(dims[-1], classes),
    )


def efficientnet_b0(classes: int = 1000) -> nn.Module:
    cfg = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ]
    layers: list[nn.Module] = [cbr(3, 32, 3, 2, act=nn.SiLU)]
    cin = 32
    for t, k, s, c, n in cfg:
        for i in range(n):
            layers.append(InvertedResidual(cin, k, cin * t, c, True, nn.SiLU, s if i == 0 else 1))
            cin = c
    return nn.Sequential(
        *layers,
        cbr(cin, 1280, 1, act=nn.SiLU),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(1280, classes),
    )


def regnet_x_400mf(classes: int = 1000) -> nn.Module:
    widths, depths, group_w = (32, 64, 160, 400), (1, 2, 7, 12), 16
    layers: list[nn.Module] = [cbr(3, 32, 3, 2)]
    cin = 32
    for w, d in zip(widths, depths, strict=True):
        for i in range(d):
            layers.append(Bottleneck(cin, w // 4, 2 if i == 0 else 1, groups=w // group_w, width=w))
            cin = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


class UNet(nn.Module):
    """A small U-Net (segmentation): conv blocks, max-pool down, transposed-conv up, skips."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.d1, self.d2, self.mid = cbr(3, c), cbr(c, 2 * c), cbr(2 * c, 4 * c)
        self.u2, self.c2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2), cbr(4 * c, 2 * c)
        self.u1, self.c1 = nn.ConvTranspose2d(2 * c, c, 2, 2), cbr(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        b = self.c2(torch.cat([self.u2(m), b], 1))
        return self.out(self.c1(torch.cat([self.u1(b), a], 1)))


class SuperResolution(nn.Module):
    """ESPCN-style super-resolution: convs then a pixel shuffle (depth_to_space)."""

    def __init__(self, r: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
            nn.Conv2d(32, r * r, 3, padding=1), nn.PixelShuffle(r),
        )  # fmt: skip

    def forward(self, x):
        return self.body(x)


class Yolo(nn.Module):
    """A YOLO-style detector neck: strided conv backbone, upsample and concat, 1x1 heads."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.b1 = nn.Sequential(cbr(3, c, 3, 2, act=nn.SiLU), cbr(c, 2 * c, 3, 2, act=nn.SiLU))
        self.b2 = cbr(2 * c, 4 * c, 3, 2, act=nn.SiLU)
        self.b3 = cbr(4 * c, 8 * c, 3, 2, act=nn.SiLU)
        self.lat = cbr(8 * c, 4 * c, 1, act=nn.SiLU)
        self.fuse = cbr(8 * c, 4 * c, 3, act=nn.SiLU)
        self.h1, self.h2 = nn.Conv2d(8 * c, 85 * 3, 1), nn.Conv2d(4 * c, 85 * 3, 1)

    def forward(self, x):
        p2 = self.b2(self.b1(x))
        p3 = self.b3(p2)
        up = F.interpolate(self.lat(p3), scale_factor=2.0, mode="nearest")
        return self.h1(p3), self.h2(self.fuse(torch.cat([up, p2], 1)))
