"""Readers and writers of external formats (MIL, weight.bin, netplist, .hwx, bundle manifest)."""
