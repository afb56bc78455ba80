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
    "runtime": {"errors", "ir", "formats", "codegen"},
    # issue 14: language models drive the whole toolchain (build graphs, compile, run, estimate)
    "llm": {"errors", "ir", "frontend", "targets", "compiler", "runtime", "cost"},
}
DRIVERS = {"cli", "compiler", "__init__", "__main__", "ops", "report"}
# Exceptions, each with its reason (also in the issue notes):
EXCEPTIONS: dict[str, set[str]] = {
    # issue 6: netplist.read() returns an ir.Graph, so the netplist reader builds one
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


def test_every_package_is_in_the_table() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert packages <= set(ALLOWED) | DRIVERS
