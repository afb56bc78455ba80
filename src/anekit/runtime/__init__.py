"""Running programs: ``Program`` (compile once, run many) and the backends (``sim``: the fp16 MIL interpreter)."""
