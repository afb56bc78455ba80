"""The program cache serves only what it verified: edited entries, forged source indexes,
links, other users' folders, planted locks and pipes, a killed insert, foreign folders in
`cache clear`, files where folders belong. Through the API and `anekit cache`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.cli import main
from anekit.compiler import load_or_compile
from anekit.runtime.cache import CacheError, ProgramCache, source_key


def _model(seed: int, n: int = 32) -> anekit.Graph:
    w = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    x = anekit.input("x", (1, n))
    return anekit.graph([anekit.ops.relu(anekit.ops.matmul(x, w), name="y")])


FEEDS = {"x": np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 32)}


def _expected(seed: int) -> np.ndarray:
    return anekit.compile(_model(seed), "m4").program.run(FEEDS)["y"]


def _entry(cache_dir: Path, key: str) -> Path:
    return cache_dir / "entries" / key


def _count_compiles(monkeypatch) -> list:  # noqa: ANN001
    import anekit.compiler as compiler

    calls = []
    real = compiler.compile

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile", counting)
    return calls


def test_an_entry_edited_and_re_signed_is_not_served(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    cache = ProgramCache(tmp_path)
    key = load_or_compile(_model(0), "m4", cache=cache).cache_key
    bundle = _entry(tmp_path, key) / "bundle"
    weights = next(bundle.glob("segments/*/weights/weight.bin"))
    data = bytearray(weights.read_bytes())
    data[-64:] = np.full(32, np.nan, np.float16).tobytes()  # NaN weights
    weights.write_bytes(bytes(data))
    manifest = json.loads((bundle / "manifest.json").read_text())
    rel = weights.relative_to(bundle).as_posix()
    manifest["files"][rel]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()  # re-signed
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert cache.get(key) is None  # digests agree, but the manifest no longer hashes to the key
    calls = _count_compiles(monkeypatch)
    program = load_or_compile(_model(0), "m4", cache=cache)
    assert calls == [1]  # a miss: compiled again, and the damaged entry replaced
    np.testing.assert_array_equal(program.run(FEEDS)["y"], _expected(0))
    assert cache.get(key) is not None


def test_a_source_index_pointing_at_another_model_is_a_miss(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    cache = ProgramCache(tmp_path)
    load_or_compile(_model(1), "m4", cache=cache)
    key_b = load_or_compile(_model(2), "m4", cache=cache).cache_key
    source_a = source_key(_model(1), "m4", {})
    (tmp_path / "sources" / source_a).write_text(key_b)  # model B's entry for model A
    program = load_or_compile(_model(1), "m4", cache=cache)
    np.testing.assert_array_equal(program.run(FEEDS)["y"], _expected(1))


def test_an_entry_that_is_a_link_or_a_file_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    cache = ProgramCache(tmp_path / "c")
    key = load_or_compile(_model(3), "m4", cache=cache).cache_key
    entry = _entry(tmp_path / "c", key)
    entry.rename(outside)
    entry.symlink_to(outside)
    with pytest.raises(CacheError, match="is a symbolic link, not a folder anekit wrote"):
        cache.get(key)
    entry.unlink()
    entry.write_text("a file")
    with pytest.raises(CacheError, match="is a file, not a folder anekit wrote"):
        cache.get(key)
    with pytest.raises(CacheError, match="is a file"):
        load_or_compile(_model(3), "m4", cache=cache)
    assert entry.read_text() == "a file"  # not anekit's: left where it is
    # the bundle inside an entry, as a link: never followed, a miss
    entry.unlink()
    entry.mkdir()
    (entry / "bundle").symlink_to(outside / "bundle")
    assert cache.get(key) is None


def test_a_cache_folder_others_can_write_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(CacheError, match="can be written by other users"):
        load_or_compile(_model(4), "m4", cache=ProgramCache(shared))
    monkeypatch.setenv("ANEKIT_CACHE_DIR", str(shared))
    assert main(["cache", "info"]) == 2
    assert "can be written by other users" in capsys.readouterr().err
    if os.geteuid() == 0:  # root can hand the folder to another user to try that case
        os.chmod(shared, 0o755)
        os.chown(shared, 65534, 65534)
        with pytest.raises(CacheError, match="belongs to another user"):
            ProgramCache(shared).info()


def test_the_cache_folder_given_as_a_file_is_a_user_error(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    file = tmp_path / "cache.txt"
    file.write_text("notes")
    monkeypatch.setenv("ANEKIT_CACHE_DIR", str(file))
    for action in ("info", "clear"):
        assert main(["cache", action]) == 2
        err = capsys.readouterr().err
        assert "is a file, not a folder" in err and "Traceback" not in err
    with pytest.raises(CacheError, match="is a file, not a folder"):
        load_or_compile(_model(4), "m4")
    assert file.read_text() == "notes"


def test_a_planted_lock_link_creates_nothing_outside(tmp_path: Path) -> None:
    cache_dir = tmp_path / "c"
    cache_dir.mkdir(mode=0o700)
    target = tmp_path / "victim"
    (cache_dir / ".lock").symlink_to(target)
    with pytest.raises(CacheError, match="cache lock"):
        ProgramCache(cache_dir).info()
    assert not os.path.lexists(target)


def test_a_pipe_at_a_source_index_hangs_nothing(tmp_path: Path) -> None:
    """A FIFO where a source index belongs: lookups and inserts go on (in a child process
    with a deadline: a blocking open would hang it)."""
    code = (
        "import os, sys\n"
        "from anekit.compiler import load_or_compile\n"
        "from anekit.runtime.cache import ProgramCache, source_key\n"
        "from tests.runtime.test_cache_trust import _model\n"
        "cache = ProgramCache(sys.argv[1])\n"
        "os.makedirs(os.path.join(sys.argv[1], 'sources'), mode=0o700)\n"
        "os.mkfifo(os.path.join(sys.argv[1], 'sources', source_key(_model(5), 'm4', {})))\n"
        "for _ in range(2):\n"
        "    load_or_compile(_model(5), 'm4', cache=cache)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_killed_inserts_folder_is_removed(tmp_path: Path) -> None:
    cache = ProgramCache(tmp_path)
    load_or_compile(_model(6), "m4", cache=cache)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / "entries" / f".insert.{dead}-0123abcd"
    (stale / "entry").mkdir(parents=True)
    (stale / "entry" / "weight.bin").write_bytes(b"\0" * 4096)
    mine = tmp_path / "entries" / f".insert.{os.getpid()}-0123abcd"  # a live insert: kept
    mine.mkdir()
    load_or_compile(_model(7), "m4", cache=cache)
    assert not stale.exists() and mine.exists()
    stale.mkdir()
    cache.clear()
    assert not stale.exists()


def test_clear_removes_only_anekits_entries(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("ANEKIT_CACHE_DIR", str(tmp_path))
    load_or_compile(_model(8), "m4")
    foreign = tmp_path / "entries" / ("ab" * 32)
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("years of work")
    # an entry with one file anekit did not write is not provably anekit's either
    key = load_or_compile(_model(9), "m4").cache_key
    (_entry(tmp_path, key) / "notes.txt").write_text("mine")
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert (foreign / "thesis.tex").read_text() == "years of work"
    assert (_entry(tmp_path, key) / "notes.txt").read_text() == "mine"


def test_a_source_index_link_to_a_huge_file_is_not_read(tmp_path: Path) -> None:
    cache = ProgramCache(tmp_path)
    skey = source_key(_model(10), "m4", {})
    (tmp_path / "sources").mkdir(parents=True, mode=0o700)
    (tmp_path / "sources" / skey).symlink_to("/dev/zero")
    assert cache.lookup_source(skey) is None  # never opened through the link
    big = tmp_path / "sources" / ("cd" * 32)
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: a 1 GiB index file is refused by its size
    assert cache.lookup_source(big.name) is None
