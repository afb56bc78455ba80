"""`python -m anekit` runs the command line."""

from anekit.cli import entry

entry()
