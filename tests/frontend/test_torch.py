"""from_torch: exports in memory with either torch exporter; the graph matches torch's forward."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import anekit
from anekit.errors import MissingDependencyError, ModelError
from anekit.frontend.torch import export_onnx
from tests.numerics import assert_close_to_reference

EXPORTERS = ("dynamo", "torchscript")


class TwoInputs(torch.nn.Module):
    """Conv + BatchNorm + Dropout on an image, mixed with a gated vector input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.bn.running_mean.normal_(0.0, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, image: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        y = self.drop(torch.relu(self.bn(self.conv(image))))
        return self.fc(y.mean(dim=(2, 3))) * torch.sigmoid(gate)


@pytest.fixture(scope="module")
def example() -> tuple[TwoInputs, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return TwoInputs(), (torch.randn(1, 3, 12, 12), torch.randn(1, 4))


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_graph_matches_torch_forward_and_keeps_input_names(exporter: str, example) -> None:
    module, (image, gate) = example
    module.train()  # exported in eval mode whatever mode the module is in
    graph = anekit.from_torch(module, (image, gate), ["pixels", "gate"], exporter=exporter)
    assert module.training and module.bn.training  # the module's flags are put back
    assert [(v.name, v.shape, str(v.dtype)) for v in graph.inputs] == [
        ("pixels", (1, 3, 12, 12), "fp32"),
        ("gate", (1, 4), "fp32"),
    ]
    assert graph.metadata["source"] == "torch" and graph.metadata["exporter"] == exporter
    module.eval()
    with torch.no_grad():
        expected = module(image, gate).numpy()
    (out,) = graph.run({"pixels": image.numpy(), "gate": gate.numpy()}).values()
    assert_close_to_reference(out, expected, f"from_torch({exporter})")


def test_submodule_training_flags_are_restored_individually(example) -> None:
    module, inputs = example
    module.train()
    module.bn.eval()
    export_onnx(module, inputs, exporter="torchscript")
    assert module.training and module.conv.training and not module.bn.training


def test_numpy_inputs_output_names_and_opset() -> None:
    torch.manual_seed(1)
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU())
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    graph = anekit.from_torch(
        module, x, ["x"], exporter="torchscript", opset=17, output_names=["y"]
    )
    assert graph.metadata["opset"] == 17
    assert graph.output_names == ("y",)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert_close_to_reference(graph.run({"x": x})["y"], expected)


def test_integer_inputs_keep_their_dtype() -> None:
    torch.manual_seed(2)
    module = torch.nn.Embedding(10, 3)
    ids = torch.tensor([[1, 7, 3]])
    graph = anekit.from_torch(module, ids, ["ids"], exporter="torchscript")
    assert str(graph.inputs[0].dtype) == "int64"
    with torch.no_grad():
        expected = module(ids).numpy()
    np.testing.assert_array_equal(next(iter(graph.run({"ids": ids.numpy()}).values())), expected)


def test_nothing_is_written_to_disk(tmp_path, monkeypatch, example) -> None:
    monkeypatch.chdir(tmp_path)
    module, inputs = example
    for exporter in EXPORTERS:
        anekit.from_torch(module, inputs, exporter=exporter)
    assert list(tmp_path.iterdir()) == []


class DataDependentBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.sum() > 0 else -x


class UsesDiff(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diff(x, dim=-1)


@pytest.mark.parametrize(
    ("exporter", "module", "torch_words"),
    [
        ("dynamo", DataDependentBranch(), "torch.export"),
        ("torchscript", UsesDiff(), "aten::diff"),
    ],
)
def test_exporter_failure_is_a_model_error(exporter, module, torch_words) -> None:
    with pytest.raises(ModelError) as info:
        anekit.from_torch(module, torch.randn(2, 5), exporter=exporter)
    message = str(info.value)
    assert f"torch's {exporter} exporter failed on {type(module).__name__}" in message
    assert torch_words in message
    assert "\n" not in message.split("\n  hint:")[0]  # one line, then the hint
    assert "\x1b[" not in message  # torch's terminal colours are stripped


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"input_names": ["a", "b"]}, "2 name(s) for 1 example input(s)"),
        ({"exporter": "onnxscript"}, "unknown exporter 'onnxscript'"),
        ({"example_inputs": ["not a tensor"]}, "example input 0 is a str"),
        ({"input_shapes": {"x": (3, 4)}}, "fixes it to 2"),
    ],
)
def test_bad_arguments_are_model_errors(kwargs, words) -> None:
    args = {"module": torch.nn.Linear(4, 4), "example_inputs": torch.randn(2, 4)}
    args.update(kwargs)
    if "input_shapes" in kwargs:
        args["input_names"] = ["x"]
        args["exporter"] = "torchscript"
    with pytest.raises(ModelError, match=words.replace("(", r"\(").replace(")", r"\)")):
        anekit.from_torch(**args)


def test_not_a_module_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="needs a torch.nn.Module, got function"):
        anekit.from_torch(lambda x: x, torch.randn(1))


def test_missing_torch_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(MissingDependencyError) as info:
        anekit.from_torch(object(), None)
    assert "from_torch needs the Python package 'torch'" in str(info.value)
    assert "anekit[torch]" in str(info.value)


def test_exporter_missing_its_package_names_the_extra(monkeypatch) -> None:
    """The dynamo exporter imports onnxscript lazily; without it, say which extra to install."""

    def export(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'onnxscript'", name="onnxscript")

    monkeypatch.setattr(torch.onnx, "export", export)
    with pytest.raises(MissingDependencyError) as info:
        anekit.from_torch(torch.nn.ReLU(), torch.randn(2))
    assert "needs the Python package 'onnxscript'" in str(info.value)
    assert "anekit[torch]" in str(info.value)
