"""The package dependency table of ARCHITECTURE.md, enforced on the source.

Only imports that run count: imports under `if TYPE_CHECKING:` are annotations.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "anekit"

# package -> the anekit packages it may import at run time (ARCHITECTURE.md's table).
# `errors` is a leaf every package may use. The drivers (`cli`, `compiler`, the top-level
# `anekit` module and `anekit.ops`) may import everything, like the CLI in the table.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "ir": {"errors"},
    "frontend": {"errors", "ir"},
    "targets": {"errors"},
    "passes": {"errors", "ir", "targets"},
    "schedule": {"errors", "ir", "targets"},
    "cost": {"errors", "ir", "targets", "schedule"},
    "codegen": {"errors", "ir", "formats"},
    "formats": {"errors"},
    # the fp16 MIL simulator: parses and runs MIL programs; ir for the fp16 limits only
    "simulator": {"errors", "formats", "ir"},
    # the H13 engine emulator: runs .hwx task descriptors
    "emulator": {"errors", "formats"},
    # runtime runs programs on the simulator and the emulator; it reads the chip a bundle was compiled for (binding checks its I/O rules, sessions
    # its minimum surface) and binds LoRA adapter inputs
    "runtime": {"errors", "ir", "formats", "codegen", "targets", "lora", "simulator", "emulator"},
    # LoRA rewrites IR graphs (adapter inputs on linear layers)
    "lora": {"errors", "ir"},
    # train builds step graphs (ir), compiles them (compiler) and runs them (runtime)
    "train": {"errors", "ir", "frontend", "targets", "passes", "schedule", "cost", "codegen",
              "formats", "runtime", "compiler"},
    # language models drive the whole toolchain (build graphs, compile, run,
    # estimate); their channel-axis norms share the compiler's fp16-safe scale floor (passes)
    "llm": {"errors", "ir", "frontend", "targets", "compiler", "runtime", "cost", "codegen",
            "passes"},
}
# Leaves every package may use besides `errors`: the memory budget, reading untrusted files
# (regular files only, sniffed first) and replacing folders atomically, fresh names, the
# version (`anekit.version`, which bundles and caches record), and float16 conversion with
# the compiled kernels (`_native`) that the compiler, weight updates and the simulator share.
LEAVES = {"errors", "budget", "files", "atomic", "naming", "float16", "_native", "version"}
ALLOWED = {
    **{package: allowed | LEAVES for package, allowed in ALLOWED.items()},
    "budget": {"errors"},
    "files": {"errors", "budget"},
    "atomic": {"errors"},
    "naming": set(),
    "version": set(),
    "float16": {"_native"},
    "_native": set(),
}
# numerics drives the compiler and the simulator over one model, like the CLI
DRIVERS = {"cli", "compiler", "__init__", "__main__", "ops", "report", "numerics"}
# Exceptions, each with its reason:
EXCEPTIONS: dict[str, set[str]] = {
    # netplist.read() returns an ir.Graph, so the netplist reader builds one
    "formats/netplist": {"ir"},
}


def _runtime_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "anekit":
            names = [f"anekit.{a.name}" for a in node.names]  # from anekit import targets
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[1] for n in names if n.startswith("anekit."))
    return found


def test_packages_import_only_what_the_design_allows() -> None:
    violations = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        package = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if package in DRIVERS:
            continue
        allowed = set(ALLOWED[package]) | {package}
        for prefix, extra in EXCEPTIONS.items():
            if str(rel).startswith(prefix):
                allowed |= extra
        bad = _runtime_imports(path) - allowed
        if bad:
            violations.append(f"{rel} imports {sorted(bad)}")
    assert not violations, "\n".join(violations)


def test_only_the_entry_points_import_the_cli() -> None:
    """The CLI is a driver of library code, never a library: the report, the compiler and
    every package call library functions, not a command's module."""
    offenders = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] not in {"cli", "__main__.py"}
        and "cli" in _runtime_imports(path)
    ]
    assert not offenders, offenders


def test_every_package_is_in_the_table() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    modules = {p.stem for p in SRC.glob("*.py")}
    assert packages | modules <= set(ALLOWED) | DRIVERS


def test_from_anekit_import_forms_are_seen(tmp_path: Path) -> None:
    """`from anekit import targets` counts as importing the targets package."""
    source = tmp_path / "m.py"
    source.write_text("from anekit import targets, ir\nfrom anekit.codegen import mil\n")
    assert _runtime_imports(source) == {"targets", "ir", "codegen"}


def test_the_formats_load_without_the_builder_the_ir_or_the_compiler() -> None:
    """Reading a file format needs no compiler: `import anekit.formats.blob` (which runs the
    top-level package first) loads no frontend, IR, passes or codegen module."""
    import subprocess
    import sys

    code = "import sys, anekit.formats.blob, anekit.formats.bundle; print(sorted(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = {m.split(".")[1] for m in ast.literal_eval(out) if m.startswith("anekit.")}
    assert not loaded & {"frontend", "ir", "passes", "codegen", "compiler", "runtime"}, loaded


def _private_imports(path: Path) -> list[str]:
    """`from anekit.x import _name` (absolute: another module's private name), and relative
    imports of a private name from outside the module's own directory."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        absolute = node.level == 0 and (node.module or "").startswith("anekit")
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and alias.name != "_native" and (absolute or node.level > 1):
                found.append(f"{'.' * node.level}{node.module or ''}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    """A leading underscore means "this module's own": another module that needs the name
    gets a public one. Siblings of one package may share internals through relative
    imports; `_native` is the C extension module, not a name."""
    offenders = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in sorted(SRC.rglob("*.py"))
        for name in _private_imports(path)
    ]
    assert not offenders, "\n".join(offenders)


def test_private_imports_are_seen(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from anekit.runtime.program import _key, run\nfrom .model import _NAME\n"
        "from ..ops import _helper\nfrom anekit import _native\n"
    )
    assert _private_imports(source) == ["anekit.runtime.program._key", "..ops._helper"]
