"""Compiler passes: canonicalize, decompose, layout, fuse, legalize, validate, segment."""
