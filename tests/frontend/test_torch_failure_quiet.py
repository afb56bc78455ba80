"""A failed torch export is one message: nothing else reaches the terminal (the TorchScript
exporter's C++ side dumps the whole Torch IR graph to the process's stderr otherwise)."""

from __future__ import annotations

import pytest

import anekit
from anekit.errors import ModelError

torch = pytest.importorskip("torch")


class _Fft(torch.nn.Module):
    def forward(self, x):  # noqa: ANN001, ANN201
        return torch.fft.fft2(x).real  # no ONNX export in either exporter's opsets here


def test_torchscript_failure_is_one_message(capfd) -> None:
    with pytest.raises(ModelError) as caught:
        anekit.from_torch(_Fft(), (torch.randn(1, 4, 4),), ["x"], exporter="torchscript")
    out, err = capfd.readouterr()
    assert "graph(" not in out + err and "Torch IR graph" not in out + err
    assert out == "" and err == ""
    message = str(caught.value)
    assert "aten::fft_fft2" in message and len(message.splitlines()) == 2  # message and hint


def test_output_comes_back_after_an_export(capfd) -> None:
    anekit.from_torch(torch.nn.ReLU(), (torch.randn(1, 4),), ["x"], exporter="torchscript")
    print("still here")
    assert "still here" in capfd.readouterr().out
