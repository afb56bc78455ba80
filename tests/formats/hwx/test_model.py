"""The JSON form of a decoded .hwx file (what `anekit inspect --json` prints)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from .helpers import HWX_FILES, HWX_IDS


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_json_has_the_shape_issue_6_requires(decoded, path):
    f = decoded[path.stem]
    doc = json.loads(f.to_json())
    assert doc["kind"] == "hwx"
    assert doc["header"]["magic"] == 0xBEEFFACE
    assert set(doc["build"]) >= {"compiler", "version", "target", "flags"}
    assert doc["build"]["version"] == f.banner.version
    assert [s["name"] for s in doc["segments"]] == [s.name for s in f.segments]
    for tensor, entry in zip(f.tensors, doc["tensors"], strict=True):
        assert set(entry) >= {"name", "role", "shape", "strides", "dtype"}
        assert entry["shape"] == list(tensor.shape) and len(entry["shape"]) == 4
        assert entry["strides"] == list(tensor.strides)
    assert len(doc["task_descriptors"]) == len(f.task_descriptors)
    for entry in doc["task_descriptors"]:
        assert set(entry) >= {"offset", "size", "streams", "fields"}
        assert all(set(s) >= {"name", "address", "words"} for s in entry["streams"])
        assert sum(len(s["words"]) + 1 for s in entry["streams"]) * 4 + 0x28 == entry["size"]
        assert all(name.count(".") >= 2 for name in entry["fields"])
    assert len(doc["relocations"]) == len(f.relocations)
    assert all(
        {"address", "symbol_index", "pcrel", "length", "extern", "type"} <= set(r)
        for r in doc["relocations"]
    )


def test_decoded_values_are_frozen(decoded):
    f = decoded["h13_relu"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.generation = "h99"  # type: ignore[misc]
    with pytest.raises(TypeError):
        f.task_descriptors[0].fields["Common.InDim.Win"] = 1  # type: ignore[index]


def test_tensor_lookup(decoded):
    f = decoded["h13_sum"]
    assert f.tensor("image2").role == "input"
    with pytest.raises(KeyError):
        f.tensor("nope")
