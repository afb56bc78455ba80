"""Training under careless and hostile input: out-of-range labels, non-finite or negative
hyperparameters, wrong argument types, edited checkpoints, a pipe as a checkpoint path,
a killed save's leftovers. Each is a clear AnekitError (exit 2 on the command line),
before anything trains or is written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from anekit.cli import main
from anekit.errors import AnekitError, FormatError, InputError
from anekit.train import SGD, Adam, AdamW, Trainer, warmup_cosine
from anekit.train import checkpoint as ckpt
from tests.cli.test_train_cli import files  # noqa: F401 - the module's fixture
from tests.train.models import digits, mlp, mlp_weights


def _trainer(**kw) -> Trainer:  # noqa: ANN003
    return Trainer(mlp(8, mlp_weights()), "cross_entropy", Adam(lr=1e-2), backend="reference", **kw)


def _data(n: int = 32) -> dict[str, np.ndarray]:
    train, _ = digits(n)
    return train


@pytest.mark.parametrize("label", [50, 10, -3, 3 + 2**32])
def test_labels_outside_the_class_count_are_refused(label: int) -> None:
    data = _data()
    data["target"] = data["target"].copy()
    data["target"][5] = label
    t = _trainer()
    with pytest.raises(InputError, match=r"class label|beyond int32"):
        t.fit(data, 1, 8, progress=False)
    with pytest.raises(InputError, match=r"class label|beyond int32"):
        t.step({k: v[:8] for k, v in data.items()})
    assert t.step_count == 0 and t.history == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: Adam(lr=float("nan")),
        lambda: Adam(lr=float("inf")),
        lambda: Adam(lr=-1.0),
        lambda: Adam(lr="fast"),
        lambda: Adam(weight_decay=float("nan")),
        lambda: AdamW(weight_decay=-0.1),
        lambda: Adam(betas=(0.9, 1.0)),
        lambda: Adam(betas=(0.9,)),
        lambda: Adam(eps=0.0),
        lambda: SGD(lr=0.1, momentum=float("nan")),
        lambda: warmup_cosine(float("nan"), 10),
        lambda: warmup_cosine(0.1, 1.5),
    ],
)
def test_non_finite_or_negative_hyperparameters_are_refused(make) -> None:  # noqa: ANN001
    with pytest.raises(InputError, match="must be"):
        make()


@pytest.mark.parametrize("kw", [{"max_grad_norm": -1.0}, {"max_grad_norm": float("nan")},
                                {"loss_scale": float("inf")}, {"loss_scale": 0}, {"seed": -1},
                                {"seed": [1]}])  # fmt: skip
def test_trainer_settings_are_checked(kw: dict) -> None:
    with pytest.raises(InputError, match="must be"):
        _trainer(**kw)


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"epochs": 1.5}, "epochs"), ({"batch_size": 0}, "batch_size"), ({"batch_size": True}, "batch_size"),
     ({"steps": 0}, "steps")],
)  # fmt: skip
def test_fit_arguments_are_checked(kw: dict, match: str) -> None:
    args = {"epochs": 1, "batch_size": 8, **kw}
    t = _trainer()
    with pytest.raises(InputError, match=match):
        t.fit(_data(), progress=False, **args)
    assert t.step_count == 0


def test_a_step_without_target_or_a_mapping() -> None:
    t = _trainer()
    with pytest.raises(InputError, match=r"has no \['target'\]"):
        t.step({"x": _data()["x"][:8]})
    with pytest.raises(InputError, match="mapping"):
        t.step([1, 2, 3])
    with pytest.raises(InputError, match="mapping"):
        t.fit([1, 2], 1, 8, progress=False)


def test_plotting_without_matplotlib_is_refused_before_training(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    t = _trainer()
    with pytest.raises(AnekitError, match="matplotlib"):
        t.fit(_data(), 1, 8, progress=False, plot=tmp_path / "loss.png")
    assert t.step_count == 0


def test_trainer_load_takes_a_path_and_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(AnekitError, match="must be a path"):
        Trainer.load(12345)
    with pytest.raises(FormatError, match="does not exist"):
        Trainer.load(tmp_path / "none.npz")


def _saved(tmp_path: Path) -> Path:
    t = _trainer()
    t.fit(_data(), 1, 8, steps=2, progress=False)  # mid-epoch: a data order and position
    return t.save(tmp_path / "ck.npz")


def _rewrite(path: Path, edit, *, resign: bool, raw: str | None = None) -> None:  # noqa: ANN001
    """Rewrite the checkpoint's manifest through ``edit`` (and re-sign it when ``resign``,
    as someone who knows the format would); ``raw`` replaces the text '"@@"' in it."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(arrays["__manifest__"].tobytes())
    model = json.loads(arrays["__model__"].tobytes())
    edit(manifest)
    if resign:
        manifest[ckpt.SELF] = ckpt._documents_digest(manifest, model)
    text = json.dumps(manifest)
    if raw is not None:
        text = text.replace('"@@"', raw)
    arrays["__manifest__"] = np.frombuffer(text.encode(), np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    "edit",
    [lambda m: m.update(step=10**6), lambda m: m.update(position=7),
     lambda m: m.update(loss_scale=float("nan"))],
)  # fmt: skip
def test_an_edited_manifest_fails_its_checksum(tmp_path: Path, edit) -> None:  # noqa: ANN001
    path = _saved(tmp_path)
    _rewrite(path, edit, resign=False)
    with pytest.raises(FormatError, match="manifest fails its checksum"):
        Trainer.load(path)


@pytest.mark.parametrize(
    "edit",
    [lambda m: m.pop("optimizer"), lambda m: m.update(params=5), lambda m: m.update(rng="x"),
     lambda m: m.update(onnx="zz"), lambda m: m.update(loss_scale=float("nan")),
     lambda m: m.update(step=-4), lambda m: m.update(position=10**9),
     lambda m: m.update(history={"a": 1}), lambda m: m.update(optimizer={"kind": "sgd"}),
     lambda m: m.update(target=[1]), lambda m: m.update(freeze=7)],
)  # fmt: skip
def test_structural_edits_are_a_format_error(tmp_path: Path, edit) -> None:  # noqa: ANN001
    path = _saved(tmp_path)
    _rewrite(path, edit, resign=True)
    with pytest.raises(AnekitError):
        Trainer.load(path)


def test_a_deeply_nested_manifest_is_a_format_error(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    _rewrite(path, lambda m: m.update(history="@@"), resign=False, raw="[" * 100000 + "]" * 100000)
    with pytest.raises(FormatError):
        Trainer.load(path)


def test_a_huge_manifest_is_checked_against_the_memory_budget(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    path = _saved(tmp_path)
    _rewrite(path, lambda m: m.update(padding="x" * (30 << 20)), resign=True)
    monkeypatch.setenv("ANEKIT_MAX_MEMORY", "128M")
    with pytest.raises(AnekitError, match=r"parsing the checkpoint's documents needs .* more than the memory budget"):
        Trainer.load(path)


def test_saving_to_a_pipe_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = _trainer()

    def timeout(*_):  # noqa: ANN002, ANN202
        raise TimeoutError("Trainer.save blocked on a pipe")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    try:
        with pytest.raises(FormatError, match="not an anekit checkpoint"):
            t.save(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not ckpt.is_checkpoint(fifo)


def test_a_killed_saves_temporary_files_are_removed_by_the_next_save(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f".ck.npz.anekit-{dead}-0123abcd.tmp"
    stale.write_bytes(b"PK half a zip")
    live = tmp_path / f".ck.npz.anekit-{os.getpid()}-0123abcd.tmp"  # this process: may be writing
    live.write_bytes(b"PK")
    other = tmp_path / f".other.npz.anekit-{dead}-0123abcd.tmp"  # another target's
    other.write_bytes(b"PK")
    _saved(tmp_path)
    assert not stale.exists() and live.exists() and other.exists()
    assert zipfile.is_zipfile(tmp_path / "ck.npz")


# --- the command line ------------------------------------------------------------------


def _cli(files, *extra: str) -> list[str]:  # noqa: ANN001, F811
    return ["train", str(files["model"]), "--data", str(files["train"]), "--batch-size", "32",
            "--backend", "reference", *extra]  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    [("--lr", "nan"), ("--lr", "inf"), ("--lr", "-1"), ("--weight-decay", "nan"),
     ("--max-grad-norm", "-1"), ("--max-grad-norm", "nan"), ("--seed", "-1"),
     ("--epochs", "0"), ("--batch-size", "0")],
)  # fmt: skip
def test_cli_refuses_bad_settings_before_training(files, capsys, tmp_path, extra) -> None:  # noqa: ANN001, F811
    ck = tmp_path / "ck.npz"
    assert main([*_cli(files, "--checkpoint", str(ck)), *extra]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err
    assert not ck.exists()


def test_cli_resume_with_batch_size_zero(files, capsys, tmp_path) -> None:  # noqa: ANN001, F811
    ck = tmp_path / "ck.npz"
    assert main(_cli(files, "--checkpoint", str(ck))) == 0
    capsys.readouterr()
    args = ["train", "--resume", str(ck), "--data", str(files["train"]), "--batch-size", "0"]
    assert main(args) == 2
    assert "--batch-size" in capsys.readouterr().err


def test_cli_labels_out_of_range(files, capsys, tmp_path) -> None:  # noqa: ANN001, F811
    with np.load(files["train"]) as z:
        x, y = z["x"], z["target"].copy()
    y[3] = 50
    np.savez(tmp_path / "bad.npz", x=x, target=y)
    args = ["train", str(files["model"]), "--data", str(tmp_path / "bad.npz"), "--batch-size", "32"]
    assert main(args) == 2
    assert "class label 50" in capsys.readouterr().err


def test_cli_a_model_that_is_not_onnx(files, capsys, tmp_path) -> None:  # noqa: ANN001, F811
    notes = tmp_path / "notes.onnx"
    notes.write_text("these are my notes, not a model\n" * 10)
    assert main(["train", str(notes), "--data", str(files["train"])]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "notes.onnx" in err


def test_cli_plot_without_matplotlib_fails_before_training(files, capsys, tmp_path, monkeypatch) -> None:  # noqa: ANN001, F811
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    ck = tmp_path / "ck.npz"
    assert main([*_cli(files, "--checkpoint", str(ck), "--plot", str(tmp_path / "l.png"))]) == 2
    assert "matplotlib" in capsys.readouterr().err
    assert not ck.exists()
