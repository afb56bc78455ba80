"""Acceptance: a model folder exported as stateful multifunction Core ML packages runs, from
those packages, the tokens the folder generates and transformers' fp32 tokens; every package
reloads through coremltools' milproto loader with its functions and states; the manifest
lists every file with its sha256; what cannot be exported is refused (exit 2) with nothing
written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import anekit.llm
from anekit.cli import main
from anekit.errors import ModelError
from anekit.llm.export import MANIFEST, sha256
from tests.llm.conftest import PROMPT, TINY_GPT2, TINY_LLAMA
from tests.llm.test_parity import hf_greedy

ct = pytest.importorskip("coremltools")
CONTEXT = 64
BUCKETS = (16, 64)


@pytest.fixture(scope="module", params=["tiny_gpt2", "tiny_llama"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    folder = {"tiny_gpt2": TINY_GPT2, "tiny_llama": TINY_LLAMA}[request.param]
    model = anekit.llm.load(folder, target="m4", max_context=CONTEXT)
    out = tmp_path_factory.mktemp(request.param) / "export"
    manifest = model.export(out, buckets=BUCKETS)
    return folder, model, out, manifest


def test_export_generates_the_folders_and_transformers_tokens(exported) -> None:  # noqa: ANN001
    folder, model, out, _ = exported
    shipped = anekit.llm.load(out)
    assert isinstance(shipped, anekit.llm.ExportedModel)
    got = shipped.generate(PROMPT, max_new_tokens=32, stop_at_eos=False)
    want = model.generate(PROMPT, max_new_tokens=32, stop_at_eos=False)
    hf, _ = hf_greedy(folder, want.prompt_ids, 32)
    assert got.prompt_ids == want.prompt_ids
    assert got.token_ids == want.token_ids == hf
    assert got.text == want.text


def test_every_package_reloads_with_functions_and_states(exported) -> None:  # noqa: ANN001
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    _, model, out, manifest = exported
    (chunk,) = manifest["chunks"]
    mlmodel = ct.models.MLModel(str(out / chunk["package"]), skip_model_load=True)
    spec = mlmodel.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, mlmodel.weights_dir)
    assert (
        set(program.functions) == {"prefill_16", "prefill_64", "decode"} == set(chunk["functions"])
    )
    states = [f"{k}_cache_{i}" for i in range(model.config.layers) for k in ("k", "v")]
    width = model.config.kv_heads * model.config.head_dim
    assert [s["name"] for s in chunk["states"]] == states
    assert all(s["shape"] == [1, width, 1, CONTEXT] for s in chunk["states"])
    for f in spec.description.functions:
        assert [s.name for s in f.state] == states
        assert "logits_0" in [o.name for o in f.output]
        assert not any(i.name in states for i in f.input)
        for i in f.input:  # fixed shapes only
            assert not i.type.multiArrayType.HasField("shapeRange")
            assert not i.type.multiArrayType.HasField("enumeratedShapes")
    decode_ops = [op.op_type for op in program.functions["decode"].operations]
    assert decode_ops.count("read_state") == len(states) == decode_ops.count("coreml_update_state")


def _arrays(value) -> list[np.ndarray]:  # noqa: ANN001
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [a for name in value.__dataclass_fields__ for a in _arrays(getattr(value, name))]
    return []


def test_functions_share_the_weights(exported) -> None:  # noqa: ANN001
    _, model, out, manifest = exported
    weights = out / manifest["chunks"][0]["package"] / "Data/com.apple.CoreML/weights/weight.bin"
    # every parameter once (a tied head twice: the CPU gather's table and the engine's head
    # convolution are separate constants)
    params = sum(a.size for a in _arrays(model.weights))
    # three functions, each the whole model: shared, the file stays within one fp16 copy
    assert weights.stat().st_size < 1.1 * 2 * params
    assert weights.stat().st_size > 2 * params * 0.9


def test_manifest_lists_every_file_with_its_sha256(exported) -> None:  # noqa: ANN001
    folder, _, out, manifest = exported
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        assert entry["sha256"] == sha256(out / rel) and entry["size"] == (out / rel).stat().st_size
    assert json.loads((out / MANIFEST).read_text())["files"] == manifest["files"]
    assert manifest["anekit_version"] == anekit.__version__
    assert [c["package"] for c in manifest["chunks"]] == ["chunk_0.mlpackage"]
    assert manifest["tokenizer_files"] and all(
        (out / n).is_file() for n in manifest["tokenizer_files"]
    )
    assert (out / "config.json").read_bytes() == (folder / "config.json").read_bytes()
    assert manifest["chunks"][0]["cpu_nodes"]  # the embedding gathers, said
    decode = manifest["chunks"][0]["functions"]["decode"]
    assert [p["name"] for p in decode["inputs"]] == ["ids", "positions", "mask", "write"]


def test_a_changed_export_is_refused(exported, tmp_path: Path) -> None:  # noqa: ANN001
    _, _, out, manifest = exported
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    weights = copy / manifest["chunks"][0]["package"] / "Data/com.apple.CoreML/weights/weight.bin"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="sha256"):
        anekit.llm.load(copy)


# --- refusals: exit 2, nothing written ------------------------------------------------------------


def _refused(argv: list[str], capsys: pytest.CaptureFixture, out: Path, words: str) -> None:
    assert main(argv) == 2
    assert words in capsys.readouterr().err
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert not any(p.name.startswith(f".{out.name}.anekit-") for p in out.parent.iterdir())


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    model = str(TINY_LLAMA)
    _refused(["export", model, "-t", "m1", "-o", str(out)], capsys, out, "iOS 18")
    _refused(["export", model, "-o", str(out), "--compress", "int4"], capsys, out, "per-block")
    _refused(
        ["export", model, "-o", str(out), "--max-context", "48"],
        capsys,
        out,
        "rule state-alignment",
    )
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    _refused(["export", str(bert), "-o", str(out)], capsys, out, "bert")
    out.mkdir()
    (out / "mine.txt").write_text("not anekit's")
    _refused(["export", model, "-o", str(out), "--max-context", "32", "--buckets", "16"], capsys, out,
             "an LLM export")  # fmt: skip
    assert (out / "mine.txt").read_text() == "not anekit's"


def test_an_unscaled_norm_square_is_refused() -> None:
    """The fp16-norm rule finds a variance of raw squares in an engine program."""
    from anekit import ops
    from anekit.llm.export_checks import check_fp16_safety

    x = anekit.input("x", (1, 64, 1, 16))
    var = ops.reduce_mean(ops.mul(x, x), axes=1)
    compiled = anekit.compile(
        anekit.graph([ops.identity(x * ops.rsqrt(var + 1e-5), name="y")]), "m4"
    )
    with pytest.raises(ModelError, match="rule fp16-norm"):
        check_fp16_safety(compiled, "the test program")


def test_export_estimate_counts_every_function(exported) -> None:  # noqa: ANN001
    _, model, _, manifest = exported
    est = manifest["estimate"]
    assert est["target"] == "m4" and est["chunks"] == 1 and est["decode_dispatches"] >= 1
    assert set(est["prefill"]) == {"16", "64"}
    assert est["decode_ms_per_token"] == pytest.approx(model.estimate(10)["decode_ms_per_token"])
    assert np.isclose(est["decode_tokens_per_s"] * est["decode_ms_per_token"], 1e3)


# --- every family, and a model cut into chunks --------------------------------------------------


def _export_matches(tmp_path: Path, family: str, target, steps: int) -> dict:  # noqa: ANN001
    from tests.llm.test_families import CONFIGS, PROMPT, greedy, save

    hf = save(tmp_path / "hf", CONFIGS[family](), torch.float32)
    model = anekit.llm.load(tmp_path / "hf", target=target, max_context=CONTEXT)
    manifest = model.export(tmp_path / "out", buckets=(16,))
    shipped = anekit.llm.load(tmp_path / "out")
    got = shipped.generate(PROMPT, max_new_tokens=steps, stop_at_eos=False)
    want = model.generate(PROMPT, max_new_tokens=steps, stop_at_eos=False)
    assert got.token_ids == want.token_ids == greedy(hf, PROMPT, steps), family
    return manifest


torch = pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3", "llama-bias-tied", "llama3", "mistral-window", "phi3",
                                    "qwen2-window", "qwen3"])  # fmt: skip
def test_every_family_exports(family: str, tmp_path: Path) -> None:
    _export_matches(tmp_path, family, "m4", 32)


def test_a_model_cut_into_chunks_exports_one_package_per_chunk(tmp_path: Path) -> None:
    from anekit.llm import plan
    from anekit.llm.config import parse_config
    from tests.llm.test_families import CONFIGS
    from tests.llm.test_plan import limited

    cfg = parse_config(CONFIGS["qwen2-window"]().to_dict())
    manifest = _export_matches(tmp_path, "qwen2-window", limited(plan.layer_bytes(cfg) + 1), 32)
    chunks = manifest["chunks"]
    layers = cfg.layers  # one layer per chunk, then the head alone
    assert [c["package"] for c in chunks] == [f"chunk_{i}.mlpackage" for i in range(layers + 1)]
    assert [[s["name"] for s in c["states"]] for c in chunks] == [
        [f"k_cache_{i}", f"v_cache_{i}"] for i in range(layers)] + [[]]  # fmt: skip
    assert [p["name"] for p in chunks[1]["functions"]["decode"]["inputs"]][0] == "hidden"
    assert [p["name"] for p in chunks[0]["functions"]["decode"]["outputs"]] == ["hidden_out"]
    assert manifest["estimate"]["decode_dispatches"] >= layers + 1  # an engine program per chunk


def test_cli_generate_runs_the_export_and_estimate_prints(
    exported, capsys: pytest.CaptureFixture
) -> None:  # noqa: ANN001
    _, model, out, _ = exported
    assert main(["generate", str(out), "--prompt", PROMPT, "-n", "8", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["token_ids"] == model.generate(PROMPT, max_new_tokens=8).token_ids
    assert got["estimate"]["target"] == "m4" and got["compression"] is None
    folder = str(model.path)
    assert (
        main(
            [
                "export",
                folder,
                "--max-context",
                str(CONTEXT),
                "--buckets",
                "16",
                "--estimate",
                "--json",
            ]
        )
        == 0
    )
    est = json.loads(capsys.readouterr().out)["estimate"]
    assert set(est["prefill"]) == {"16"} and est["decode_tokens_per_s"] > 0
    assert main(["export", folder]) == 2  # neither -o nor --estimate
    assert "nothing to do" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change", [{"max_context": "64"}, {"buckets": []}, {"chunks": [{"package": "../x.mlpackage"}]}]
)
def test_a_hostile_manifest_is_refused(exported, tmp_path: Path, change: dict) -> None:  # noqa: ANN001
    _, _, out, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, **change}))
    with pytest.raises(ModelError, match=MANIFEST):
        anekit.llm.load(copy)


@pytest.mark.parametrize(("scheme", "op"), [("int8", "constexpr_blockwise_shift_scale"),
                                            ("palettize4", "constexpr_lut_to_dense")])  # fmt: skip
def test_compressed_exports_run_what_the_folder_runs(scheme: str, op: str, tmp_path: Path) -> None:
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    model = anekit.llm.load(TINY_GPT2, target="m4", max_context=32, compress=scheme)
    manifest = model.export(tmp_path / "out", buckets=(16,))
    assert manifest["compress"] == scheme
    got = anekit.llm.load(tmp_path / "out").generate(PROMPT, max_new_tokens=12, stop_at_eos=False)
    assert got.token_ids == model.generate(PROMPT, max_new_tokens=12, stop_at_eos=False).token_ids
    mlmodel = ct.models.MLModel(str(tmp_path / "out" / "chunk_0.mlpackage"), skip_model_load=True)
    spec = mlmodel.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, mlmodel.weights_dir)
    assert op in [o.op_type for o in program.functions["decode"].operations]
