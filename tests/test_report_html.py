"""`anekit report`: one self-contained HTML page, rendered by a real browser (headless Chromium).

The browser test draws the page at 1400 px and reads the screenshot's pixels: the graph
shows boxes in the engine colour and in the CPU colour (the model has a Floor, which has no
engine form) across the page's width, and a skip edge; printed to PDF, the page's text holds
every node's reason. `make test` installs Debian's chromium and graphviz, so in CI this test
never skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from anekit.cli import main
from anekit.report import build_report
from anekit.report.graph_svg import PLACEMENT_COLOURS

RNG = np.random.default_rng(16)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _model(path: Path) -> Path:
    """conv + relu on the engine, a Floor on the CPU, a residual add skipping it, a softmax
    back on the engine."""
    w = helper.make_tensor(
        "w", TensorProto.FLOAT, [4, 3, 3, 3], RNG.standard_normal(108).astype(np.float32)
    )
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Floor", ["r"], ["f"], name="floor"),
        helper.make_node("Sigmoid", ["f"], ["s"], name="sigmoid"),
        helper.make_node("Add", ["s", "r"], ["a"], name="residual"),
        helper.make_node("Softmax", ["a"], ["y"], name="softmax", axis=1),
    ]
    g = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_page_is_self_contained_and_says_everything(tmp_path: Path) -> None:
    page = build_report(str(_model(tmp_path / "m.onnx")), "m4", chips=("m1", "m4"))
    # nothing to fetch: no scripts, stylesheets, images or fonts from anywhere
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", page)
    namespaces = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert set(re.findall(r"https?://[^\"' ]+", page)) <= namespaces  # XML names, not fetched
    assert "href" not in page
    assert "<td>floor</td><td>floor</td><td>floor has no engine form</td>" in page
    assert page.count('class="node cpu"') == 1 and page.count('class="node ane"') >= 2
    # every edge drawn, the residual's skip over floor and sigmoid included
    if shutil.which("dot"):
        assert page.count('class="edge"') == 6
        assert "<title>n1&#45;&gt;n4</title>" in page  # relu -> residual, past floor and sigmoid
    # the per-layer table: slowest first, then its totals
    table = page.split("<h2>Per-layer estimates on m4</h2>")[1].split("</table>")[0]
    times = [float(t) for t in re.findall(r'<td class="num">([\d.]+)</td><td class="num">[\d.]+%', table)]
    assert times[:-1] == sorted(times[:-1], reverse=True) and len(times) >= 3
    assert abs(times[-1] - sum(times[:-1])) < 0.02 and '<tr class="total">' in table
    assert "<b>ane0</b> and <b>ane1</b>" in page and "compute-bound" in page
    assert ">m1</text>" in page and ">m4</text>" in page  # one timeline row per chip
    assert "fp16 numerics" in page and "<h2>Per-layer estimates on m4</h2>" in page


def _chromium(tmp_path: Path, *args: str) -> None:
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *args],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_chromium_draws_the_graph_across_the_page_and_prints_the_reasons(tmp_path: Path) -> None:
    if CHROMIUM is None or shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("chromium or graphviz is missing: `make test` installs them")
        pytest.skip("no chromium or graphviz on this machine (apt-get install chromium graphviz)")
    from PIL import Image
    from pypdf import PdfReader

    out = tmp_path / "report.html"
    assert main(["report", str(_model(tmp_path / "m.onnx")), "-t", "m4", "-o", str(out)]) == 0
    shot, width = tmp_path / "shot.png", 1400
    _chromium(tmp_path, "--hide-scrollbars", f"--window-size={width},1000",
              f"--screenshot={shot}", out.as_uri())  # fmt: skip
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)

    def mask(hex_colour: str) -> np.ndarray:
        rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        return np.abs(image - rgb).max(axis=2) <= 2

    ane, cpu = mask(PLACEMENT_COLOURS["ane"]), mask(PLACEMENT_COLOURS["cpu"])
    # the legend's swatches sit above the graph: measure below the first wide row of boxes' top
    rows = np.flatnonzero((ane | cpu).sum(axis=1) > 40)
    graph_rows = (ane | cpu)[rows[0] :]
    cols = np.flatnonzero(graph_rows.any(axis=0))
    assert cols[-1] - cols[0] > 0.8 * width  # the boxes span the page, not a narrow column
    box = 60 * 25  # a node box is far larger than this at 1400 px
    assert ane.sum() > 2 * box and cpu.sum() > box  # engine boxes and the Floor's CPU box

    pdf = tmp_path / "report.pdf"
    _chromium(tmp_path, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", out.as_uri())
    text = " ".join(" ".join(page.extract_text().split()) for page in PdfReader(pdf).pages)
    assert "floor has no engine form" in text  # a reason, in print, not only on hover
    assert "Every node: placement and reason" in text


def test_cli_refuses_to_overwrite_a_file_it_did_not_write(tmp_path: Path, capsys) -> None:
    model = str(_model(tmp_path / "m.onnx"))
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    assert main(["report", model, "-o", str(mine), "--no-numerics"]) == 2
    assert "not an anekit report" in capsys.readouterr().err
    assert mine.read_text() == "<html>my notes</html>"
    out = tmp_path / "r.html"
    assert main(["report", model, "-o", str(out), "--no-numerics", "--chips", "m4"]) == 0
    assert main(["report", model, "-o", str(out), "--chips", "m4"]) == 0  # its own: replaced
    assert main(["report", model, "-o", str(out), "--chips", "m9"]) == 2
    assert "m9" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


PAYLOADS = [
    "<script>alert(1)</script>", "</style><script>alert(2)</script>", '" onmouseover="alert(3)',
    "' onload='alert(4)", "<img src=x onerror=alert(5)>", "<svg onload=alert(6)>",
    "</title><script>alert(7)</script>", "javascript:alert(8)", "<iframe src=javascript:1>",
    "]]><script>alert(9)</script>", "<!--", "<style>@import url(x)</style>",
    "&lt;script&gt;", "<a href=x>click</a>",
]  # fmt: skip
INVISIBLE = ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b", "\u200d",
             "\u200e", "\u200f", "\u061c", "\x1b", "\x00", "\u2028", "\ufeff"]  # fmt: skip


def _named_model(path: Path, names: list[str]) -> Path:
    """A chain of Relu nodes, each called by one of ``names`` (the file author's text)."""
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        out = f"v{i}" if i < len(names) - 1 else "y"
        nodes.append(helper.make_node("Relu", [prev], [out], name=name))
        prev = out
    g = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_names_cannot_inject_markup_or_hide_behind_invisible_characters(tmp_path: Path) -> None:
    names = [*PAYLOADS, *(f"gpj{ch}exe.{i}" for i, ch in enumerate(INVISIBLE))]
    page = build_report(str(_named_model(tmp_path / "m.onnx", names)), "m4", chips=("m4",))
    # as a browser parses it: no element or attribute came from a name
    tags, attrs, styles = set(), set(), []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attributes):  # noqa: ANN001, ANN202
            tags.add(tag)
            attrs.update(a for a, _ in attributes)
            styles.extend([tag] if tag == "style" else [])

    Collect().feed(page)
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "b", "i", "code",
                    "div", "table", "tr", "th", "td", "svg", "g", "rect", "text", "line",
                    "path", "defs", "marker", "polygon"}, tags  # fmt: skip
    assert not [a for a in attrs if a.startswith("on") or a in ("href", "src")], attrs
    assert styles == ["style"] and "<!--" not in page  # the page's own stylesheet only
    for ch in INVISIBLE:  # each shown as its code point, never interpreted
        assert ch not in page
        assert f"gpj&lt;U+{ord(ch):04X}&gt;exe" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the names are still shown


def test_a_deep_graph_folds_into_bands_of_the_page_width() -> None:
    if shutil.which("dot") is None:
        pytest.skip("no graphviz on this machine (apt-get install graphviz)")
    import anekit
    from anekit import ops
    from anekit.report.graph_svg import BAND_RANKS, graph_svg

    x = anekit.input("x", (1, 8))
    first = h = ops.relu(x, name="r0")
    for k in range(1, 2 * BAND_RANKS + 2):  # three bands
        h = ops.relu(h, name=f"r{k}")
    g = anekit.graph([ops.add(h, first, name="skip")])  # from the first band to the last
    svg = graph_svg(g.nodes, {})
    assert svg.count('class="band"') == 3
    widths = [float(w) for w in re.findall(r'<svg width="([\d.]+)%"', svg)]
    assert max(widths) == 100.0 and all(0 < w <= 100 for w in widths)
    assert svg.count('class="node stub"') == 3  # r7 -> r8, r15 -> r16 and r0 -> skip
