"""anekit's version: a leaf every package may read (bundles and caches record it)."""

__version__ = "0.1.0"
