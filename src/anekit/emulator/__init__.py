"""The engine emulator: runs H13 .hwx programs by decoding their task descriptors.

`EngineProgram.load(path).run(feeds)` executes each task descriptor of the chain as one
engine pass: the tile DMA reads its source(s) from the program's windows, the neural engine
(multiply-accumulate against weight tiles read through the relocations, or pass-through)
or the planar engine (element-wise add/mul) computes, the activation applies, and the
destination DMA writes the result. Registers the emulator does not understand raise
FormatError naming the register (see `registers.py`; docs/engine.md).
"""

from anekit.emulator.program import EngineProgram, load

__all__ = ["EngineProgram", "load"]
