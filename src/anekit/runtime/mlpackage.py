"""Core ML packages as the runtime runs them: a package read once (`anekit.formats.mlpackage`)
and each of its functions loaded for a backend, with Core ML state.

A loaded function has ``inputs`` (its non-state input names), ``outputs``, ``new_state()``
(every state zeroed, as Core ML's ``makeState``) and ``run(feeds, state)``, which writes the
function's state updates back into ``state``. ``sim`` runs the package's own MIL on the
simulator (`anekit.simulator.states`); ``ane`` compiles the package through e5rt with the
states resident on the engine (`anekit.runtime.e5rt_states`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anekit.errors import InputError
from anekit.formats.mlpackage import Package, read_package

BACKENDS = ("sim", "ane")


def read(path: Path) -> Package:
    return read_package(path)


def load_function(package: Package, path: Path, name: str, backend: str) -> Any:
    if name not in package.functions:
        raise InputError(
            f"'{path.name}' has no function '{name}' (it has {sorted(package.functions)})"
        )
    if backend == "sim":
        from anekit.simulator.states import StatefulProgram

        return StatefulProgram(package.program, package.model_dir, function=name, where=str(path))
    if backend == "ane":
        from anekit.runtime.e5rt_states import E5StatefulFunction

        return E5StatefulFunction(package, path, name)
    raise InputError(f"a package runs on {' or '.join(BACKENDS)}, not '{backend}'")
