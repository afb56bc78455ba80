"""Running compiled programs: `Program` (a loaded bundle or MIL file) and its backends."""

from anekit.runtime.program import BACKENDS, Program, load

__all__ = ["BACKENDS", "Program", "load"]
