"""Weight files: the path policy (nothing outside the netplist's directory) and bounds checks."""

from __future__ import annotations

import os
import plistlib
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats import netplist
from anekit.formats.netplist.weights import resolve

from .helpers import NETPLIST_DIR, plist

TWOS = (NETPLIST_DIR / "twos.weights").read_bytes()


def conv_netplist(
    folder: Path, weight_name: str, fmt: plistlib.PlistFormat = plistlib.FMT_XML
) -> Path:
    """simple/conv.plist (a 3->3 1x1 conv of twos.weights) with its Weights entry replaced."""
    doc = plist(NETPLIST_DIR / "simple" / "conv.plist")
    doc["net"]["Weights"] = [weight_name]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "conv.plist"
    path.write_bytes(plistlib.dumps(doc, fmt=fmt))
    return path


def reads(path: Path) -> None:
    graph = netplist.read(path)
    x = np.ones((1, 3, 1, 1), np.float16)
    np.testing.assert_array_equal(graph.run({"image": x})["probs"], 6.0)  # 2 + 2 + 2


def refused(path: Path, name: str, why: str) -> None:
    with pytest.raises(FormatError) as info:
        netplist.read(path)
    assert f"weight file '{name}' (Weights[0]), read by unit 'my_layer'" in str(info.value)
    assert why in str(info.value)


@pytest.mark.parametrize("name", ["twos.weights", "./twos.weights", "data/twos.weights"])
def test_names_inside_the_directory_are_read(tmp_path, name):
    (tmp_path / "net" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "net" / name).write_bytes(TWOS)
    reads(conv_netplist(tmp_path / "net", name))


def test_a_file_one_level_up_is_read_as_the_fixtures_need(tmp_path):
    (tmp_path / "twos.weights").write_bytes(TWOS)
    reads(conv_netplist(tmp_path / "simple", "../twos.weights"))


def test_an_absolute_path_inside_the_directory_is_read(tmp_path):
    (tmp_path / "twos.weights").write_bytes(TWOS)
    reads(conv_netplist(tmp_path, str(tmp_path / "twos.weights")))


@pytest.mark.parametrize(
    ("layout", "name", "why"),
    [
        ("../../twos.weights", "../../twos.weights", "escapes the netplist's directory"),
        ("../up/twos.weights", "../up/twos.weights", "escapes the netplist's directory"),
        ("twos.weights", "a/../../twos.weights", "escapes the netplist's directory"),
        ("../../other/twos.weights", "ABS", "an absolute path outside the netplist's directory"),
        (None, "absent.weights", "does not exist"),
    ],
)
def test_names_outside_the_directory_are_not_read(tmp_path, layout, name, why):
    net = tmp_path / "a" / "b"
    if layout is not None:
        target = (net / layout).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(TWOS)  # the file exists: the policy, not its absence, refuses it
        if name == "ABS":
            name = str(target)
    refused(conv_netplist(net, name), name, why)


def test_links_out_of_the_directory_are_not_followed(tmp_path):
    (tmp_path / "secret.weights").write_bytes(TWOS)
    net = tmp_path / "net"
    net.mkdir()
    os.symlink(tmp_path / "secret.weights", net / "twos.weights")
    refused(conv_netplist(net, "twos.weights"), "twos.weights", "through a link")


def test_a_directory_is_not_a_weight_file(tmp_path):
    (tmp_path / "net" / "twos.weights").mkdir(parents=True)
    refused(conv_netplist(tmp_path / "net", "twos.weights"), "twos.weights", "not a regular file")


def test_tmp_zero_is_reported_missing_even_if_it_exists():
    path = NETPLIST_DIR / "simple" / "gemm.plist"
    real, problem = resolve("/tmp/zero", path.parent)
    assert real is None and "absolute path outside" in problem
    with pytest.raises(FormatError, match="weight file '/tmp/zero'"):
        netplist.read(path)


def test_a_short_weight_file_is_a_bounds_error(tmp_path):
    (tmp_path / "twos.weights").write_bytes(TWOS[:17])
    with pytest.raises(FormatError) as info:
        netplist.read(conv_netplist(tmp_path, "twos.weights"))
    assert "kernel needs 18 bytes (9 x fp16) at offset 0, but the file has 17 bytes" in str(
        info.value
    )


def test_a_nul_in_a_name_is_refused(tmp_path):
    path = conv_netplist(tmp_path, "two\0s.weights", plistlib.FMT_BINARY)  # XML cannot hold NUL
    refused(path, "two\0s.weights", "NUL")
