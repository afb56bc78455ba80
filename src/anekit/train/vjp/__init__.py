"""Vector-Jacobian rules, one per IR op name.

A rule receives the `Emitter`, the forward node and the incoming gradient of each of the
node's outputs (None where no gradient flows) and returns the gradient of each input
(None for inputs without one: integer indices, absent optional inputs). It builds the
gradient from ordinary IR ops, so a gradient graph compiles and runs like any graph.

Ops whose outputs carry no gradient (comparisons, argmax, integer arithmetic) are listed
in NON_DIFFERENTIABLE; every other op needs a rule, and `rule_for` names the op that lacks
one. Rules are keyed by the op's name in the IR registry (anekit.ir.registry), so the
check `ops_without_rule()` lists the ops that still need one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from anekit.errors import UnsupportedModelError
from anekit.ir.graph import Node
from anekit.train.emit import Emitter

Rule = Callable[[Emitter, Node, Sequence[str | None]], Sequence[str | None]]
RULES: dict[str, Rule] = {}

# outputs that are integers, booleans or piecewise constant: no gradient flows through them
NON_DIFFERENTIABLE = frozenset(
    "argmax argmin equal greater greater_equal less less_equal not_equal and or xor not "
    "isnan isinf sign floor ceil round one_hot bitwise_and bitwise_or bitwise_not "
    "bitwise_xor bit_shift hardmax".split()
)


def rule(*ops: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the rule of each op in ``ops``."""

    def wrap(fn: Rule) -> Rule:
        for op in ops:
            if op in RULES:
                raise ValueError(f"op '{op}' has two gradient rules")
            RULES[op] = fn
        return fn

    return wrap


def _load() -> None:
    from anekit.train.vjp import (  # noqa: F401 - each module registers its rules
        activation,
        conv,
        elementwise,
        gather,
        linalg,
        norm,
        pool,
        reduce,
        shape,
    )


def rule_for(node: Node) -> Rule:
    _load()
    found = RULES.get(node.op)
    if found is None:
        raise UnsupportedModelError(
            f"node '{node.name}' ({node.op}): the op has no gradient rule, so the loss "
            "cannot be differentiated through it",
            hint="freeze the parameters that feed it, or express the layer with ops that "
            f"have rules ({', '.join(sorted(RULES))})",
        )
    return found


def ops_without_rule() -> list[str]:
    """IR ops that have neither a gradient rule nor a place in NON_DIFFERENTIABLE."""
    from anekit.ir.registry import op_names

    _load()
    return [op for op in op_names() if op not in RULES and op not in NON_DIFFERENTIABLE]
