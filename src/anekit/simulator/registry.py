"""Op definitions of the simulator: inputs (type domains, constness), output types and the kernel.

Each MIL op the simulator runs is one :class:`SimOp`, declared with :func:`op` from a compact
signature that follows coremltools' ``input_spec`` of the newest opset (iOS 18), which accepts
everything the older opsets accept::

    op("conv", "x:T weight:U bias?:U strides?!:int32 pad_type?!:string pad?!:int32 "
       "dilations?!:int32 groups?!:int32", "T", conv, T=FLOAT, U=FLOAT)

- ``name:types`` where ``types`` is a type-domain letter (all inputs of one letter must share a
  dtype, as coremltools checks) or ``|``-separated dtypes; ``?`` optional, ``!`` must be known
  when the program is loaded (coremltools' ``const=True``), ``*`` a tuple ``(a, b, ...)``.
- the output rule: a comma list of domain letters or dtypes (``"T"``, ``"T,int32"``), ``"T*"``
  for as many outputs as the op declares, or a function ``(dtypes, consts) -> tuple``.
- the kernel takes the inputs as keyword arguments (defaults are its Python defaults):
  numpy arrays (0-d for scalars; fp16 as float32) and ``str`` for strings.
- ``exact``: the op only moves or selects values of its inputs, so an fp16 result needs no
  rounding; ``defaults(dtypes, opset)``: defaults that depend on input dtypes (``rsqrt``'s
  epsilon is fp16(1e-12) = 0 for fp16 inputs) or on the opset (keys may also be extra kernel
  arguments, such as ``opset``); ``check(signature, opset)``: load-time validation of
  const inputs (raise ValueError), ``opset`` being the iOS version number (15 to 18).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

FLOAT = "fp16|fp32"
NUMERIC = "fp16|fp32|int32"
ANY = "fp16|fp32|int32|bool"
# iOS 17 widened the data-movement ops to these types.
WIDE = "fp16|fp32|int8|int16|int32|uint8|uint16|bool"
INDEX = "int8|int16|int32|uint8|uint16"

_PARAM = re.compile(r"([a-z_][a-z0-9_]*)([?!*]*):([A-Za-z_][A-Za-z0-9_|]*)\Z")

Kernel = Callable[..., Any]


@dataclass(frozen=True)
class Signature:
    """What an op instance is given: dtypes of its inputs and of its type domains, and the
    values of its inputs known at load time (constants, literals and defaults)."""

    dtypes: Mapping[str, str]
    domains: Mapping[str, str]
    consts: Mapping[str, Any]


OutputRule = Callable[[Signature], tuple[str, ...]]


@dataclass(frozen=True)
class Param:
    """One input of an op."""

    name: str
    types: str  # a domain letter or "|"-joined dtypes
    optional: bool = False
    const: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class SimOp:
    """A MIL op: its inputs, how its output dtypes follow, and its kernel."""

    name: str
    params: tuple[Param, ...]
    domains: Mapping[str, frozenset[str]]
    outputs: OutputRule
    kernel: Kernel
    exact: bool = False
    variadic_outputs: bool = False
    defaults: Callable[[Mapping[str, str], int], dict[str, Any]] | None = None
    check: Callable[[Signature, int], None] | None = None
    params_by_name: Mapping[str, Param] = field(default_factory=dict, compare=False)

    def allowed(self, param: Param) -> frozenset[str]:
        """The dtypes ``param`` accepts."""
        return self.domains.get(param.types) or frozenset(param.types.split("|"))


def _outputs(spec: str | OutputRule, domains: Mapping[str, frozenset[str]]) -> OutputRule:
    if callable(spec):
        return spec
    parts = tuple(p.strip().rstrip("*") for p in spec.split(","))

    def rule(sig: Signature) -> tuple[str, ...]:
        return tuple(sig.domains[p] if p in domains else p for p in parts)

    return rule


def op(
    name: str,
    signature: str,
    outputs: str | OutputRule,
    kernel: Kernel,
    *,
    exact: bool = False,
    defaults: Callable[[Mapping[str, str], int], dict[str, Any]] | None = None,
    check: Callable[[Signature, int], None] | None = None,
    **domains: str,
) -> SimOp:
    """Declare an op (see the module docstring for the signature syntax)."""
    params = []
    for token in signature.replace(",", " ").split():
        match = _PARAM.match(token)
        if match is None:
            raise ValueError(f"{name}: bad parameter spec {token!r}")
        pname, flags, types = match.groups()
        if len(types) > 1 and types in domains:
            raise ValueError(f"{name}: domain names are single letters, not {types!r}")
        params.append(Param(pname, types, "?" in flags, "!" in flags, "*" in flags))
    doms = MappingProxyType({k: frozenset(v.split("|")) for k, v in domains.items()})
    for p in params:
        if len(p.types) == 1 and p.types.isupper() and p.types not in doms:
            raise ValueError(f"{name}: parameter {p.name} uses undeclared domain {p.types}")
    variadic = isinstance(outputs, str) and outputs.endswith("*")
    return SimOp(
        name,
        tuple(params),
        doms,
        _outputs(outputs, doms),
        kernel,
        exact=exact,
        variadic_outputs=variadic,
        defaults=defaults,
        check=check,
        params_by_name=MappingProxyType({p.name: p for p in params}),
    )


def build_registry(*groups: tuple[SimOp, ...]) -> Mapping[str, SimOp]:
    """An immutable name -> SimOp mapping; a name defined twice is a bug."""
    table: dict[str, SimOp] = {}
    for group in groups:
        for d in group:
            if d.name in table:
                raise ValueError(f"MIL op {d.name!r} is defined twice")
            table[d.name] = d
    return MappingProxyType(dict(sorted(table.items())))
