"""Running compiled programs: `Program` (a loaded bundle or MIL file) and the backends it runs on."""

from anekit.runtime.program import Program, load

__all__ = ["Program", "load"]
