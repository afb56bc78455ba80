"""The HTML report of a model: placement, fallbacks, estimates per chip, fp16 numerics."""

from anekit.report.html import DEFAULT_CHIPS, GENERATOR, build_report

__all__ = ["DEFAULT_CHIPS", "GENERATOR", "build_report"]
