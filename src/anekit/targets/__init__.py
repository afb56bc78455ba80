"""The chip database: every Apple Neural Engine target with typed limits, gates and sourced figures.

>>> from anekit import targets
>>> t = targets.get("m4")
>>> t.engine, t.generation, t.features.softmax, t.perf.peak_fp16_tflops
('H16', 16, True, 19.0)
>>> t.source("perf.bandwidth_gbps")
'[apple] M4: 120 GB/s memory bandwidth.'
"""

from __future__ import annotations

import difflib
import re

from anekit.errors import TargetError
from anekit.targets.loader import default_database
from anekit.targets.model import (
    FEATURE_NAMES,
    Alternative,
    Features,
    Limits,
    Mil,
    Perf,
    Process,
    Provenance,
    Target,
    figure_paths,
)

__all__ = [
    "DEFAULT_TARGET",
    "FEATURE_NAMES",
    "Alternative",
    "Features",
    "Limits",
    "Mil",
    "Perf",
    "Process",
    "Provenance",
    "Target",
    "aliases",
    "all_targets",
    "figure_paths",
    "get",
    "names",
]

# the chip a compile is for when none is named: the newest generation with complete figures
DEFAULT_TARGET = "m4"

_VARIANT_RE = re.compile(r"^(m\d+)(pro|max|ultra)$")


_A_SERIES = re.compile(r"a\d{1,2}(-?(pro|bionic|x|z))?$")


def _normalize(name: str) -> str:
    """'M1 Pro', 'm1_pro' and 'm1pro' all become 'm1-pro'."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return _VARIANT_RE.sub(r"\1-\2", key)


def get(name: str | Target) -> Target:
    """The target for a chip name or engine code, case-insensitive; a Target is returned as is."""
    if isinstance(name, Target):
        return name
    db = default_database()
    found = db.index.get(_normalize(name)) if isinstance(name, str) else None
    if found is not None:
        return found
    valid = ", ".join(t.name for t in db.targets)
    codes = ", ".join(f"{alias} ({t.name})" for alias, t in aliases().items())
    if _A_SERIES.match(_normalize(str(name))):  # an iPhone chip: no near miss to suggest
        raise TargetError(
            f"unknown target {name!r}: anekit's targets are Mac chips (M1 to M5 and their "
            "Pro, Max and Ultra variants); there are no A-series (iPhone and iPad) targets",
            hint="by lineage an A-series chip shares its engine with an M chip (A14 with M1, "
            "A15 with M2, A16 with M3, A17 Pro with M4; `anekit targets m1` notes it under "
            "a_class): choose that M chip, or run `anekit targets` to list them",
        )
    close = difflib.get_close_matches(_normalize(str(name)), list(db.index), n=1, cutoff=0.5)
    raise TargetError(
        f"unknown target {name!r}; valid names: {valid}; engine codes: {codes}",
        hint=f"did you mean {close[0]!r}?" if close else "run `anekit targets` to list them",
    )


def names() -> list[str]:
    """Canonical chip names in generation order."""
    return [t.name for t in default_database().targets]


def aliases() -> dict[str, Target]:
    """Every engine-code alias and the target it resolves to."""
    return {alias: t for t in default_database().targets for alias in t.aliases}


def all_targets() -> list[Target]:
    """Every target in generation order."""
    return list(default_database().targets)
