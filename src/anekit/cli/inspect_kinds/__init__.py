"""The kinds of file `anekit inspect` reads, one module a kind: how to detect, describe and draw it."""
