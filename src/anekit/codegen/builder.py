"""The state of one MIL function being emitted: names, operations, named consts, weight blobs.

Lowerings (:mod:`anekit.codegen.lower`) call :meth:`FunctionBuilder.op` to append operations
and :meth:`FunctionBuilder.param` / :meth:`FunctionBuilder.tensor` for constants. Every
non-variable argument becomes a named ``const`` operation, as Apple's own output has it (and
as the engine's compiler requires for matmul's transpose flags). Identical parameter consts
are shared; tensors of at least ``BLOB_MIN_ELEMENTS`` floats go to the weight.bin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from anekit.codegen.compress import Compressed
from anekit.codegen.names import Namer
from anekit.codegen.weights import Conversions, WeightFile
from anekit.errors import ModelError
from anekit.float16 import to_float16
from anekit.formats.blob import encode
from anekit.formats.mil import (
    ArgList,
    Binding,
    BlobFile,
    MilTensorType,
    Operation,
    Scalar,
    ScalarType,
    Tensor,
    Var,
    dtype_info,
    string,
)
from anekit.formats.mil.values import WEIGHT_PATH
from anekit.ir.dtypes import FP16_MAX, DType

# coremltools moves consts of 10 or more elements to the weight file; we do the same.
BLOB_MIN_ELEMENTS = 10

# IR dtype -> MIL dtype, apart from floats (which follow the program's precision).
_INT_DTYPES = {
    DType.INT64: "int32",  # MIL computes indices in int32 (coremltools does the same)
    DType.INT32: "int32",
    DType.INT8: "int8",
    DType.UINT8: "uint8",
    DType.BOOL: "bool",
}


def mil_type(shape: Sequence[int], dtype: str) -> ScalarType | MilTensorType:
    """The MIL type of a value: a scalar type for rank 0, else a tensor type."""
    return (
        ScalarType(dtype) if len(shape) == 0 else MilTensorType(dtype, tuple(int(d) for d in shape))
    )


@dataclass(frozen=True)
class Arg:
    """An operand of a lowered op: its MIL variable (None until a constant is materialised),
    shape, MIL dtype, the constant's value when it is one, and its IR name and dtype."""

    var: str | None
    shape: tuple[int, ...]
    dtype: str
    const: np.ndarray | None = None
    ir_name: str | None = None
    ir_dtype: DType = DType.FP32

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.const is not None


class FunctionBuilder:
    """Operations of one MIL function, with its namer, shared consts and weight blobs.

    ``float_dtype`` is the program's float type: fp16 on the engine, fp32 on the CPU.
    ``weight_dtype`` is how float weights are stored in the weight.bin: fp16 by default; an
    fp32 program then reads fp16 weights through a ``cast`` (weights ``fp32`` keeps them exact).
    With an ``executor``, weights are converted on its threads while emission goes on;
    ``conversions`` (shared by the segments of one model) converts each weight only once.
    """

    def __init__(
        self,
        float_dtype: str,
        weight_dtype: str = "fp16",
        executor: Executor | None = None,
        *,
        conversions: Conversions | None = None,
        int8_tensors: bool = True,
        compressed: Mapping[str, Compressed] | None = None,
    ):
        if weight_dtype not in ("fp16", "fp32"):
            raise ValueError(f"weights are stored as fp16 or fp32, not {weight_dtype!r}")
        self.float_dtype = float_dtype
        # iOS 15/16 ops take no int8/uint8 tensors: the program carries those values as int32
        self.int8_tensors = int8_tensors
        self.weight_dtype = "fp16" if float_dtype == "fp16" else weight_dtype
        self.namer = Namer()
        self.operations: list[Operation] = []
        self.blobs = WeightFile()
        self._params: dict[tuple, str] = {}
        self._tensors: dict[str, str] = {}  # IR constant name -> MIL var
        # const op name -> the IR constant it holds unchanged (for checks of the weight.bin)
        self.ir_constants: dict[str, str] = {}
        self._stored: dict[str, str] = {}  # a tensor's var -> the const op that holds it
        self.conversions = conversions or Conversions(cast_array, executor)
        # IR constant -> its compressed form (`anekit.codegen.compress`), emitted as a
        # constexpr op where a convolution reads it
        self.compressed: Mapping[str, Compressed] = compressed or {}

    # --- types ---------------------------------------------------------------------------

    def dtype_of(self, ir_dtype: DType) -> str:
        """The MIL dtype an IR dtype is carried in by this program."""
        if ir_dtype.is_float:
            return self.float_dtype
        dtype = _INT_DTYPES[ir_dtype]
        return "int32" if dtype in ("int8", "uint8") and not self.int8_tensors else dtype

    # --- operations ------------------------------------------------------------------------

    def op(
        self,
        optype: str,
        inputs: Mapping[str, str | Sequence[str] | None],
        shape: Sequence[int],
        dtype: str,
        *,
        name: str | None = None,
        hint: str | None = None,
    ) -> str:
        """Append ``optype(inputs)`` with one output and return its variable name.

        ``inputs`` map argument names to variable names (a sequence makes an ``ArgList``;
        None omits the argument). ``name`` is a name reserved earlier (an IR value's),
        else a fresh name is made from ``hint``.
        """
        out = name or self.namer.fresh(hint or optype)
        args = []
        for key in sorted(inputs):  # Apple writes keyword arguments sorted
            value = inputs[key]
            if value is None:
                continue
            arg = (
                ArgList(tuple(Var(v) for v in value)) if not isinstance(value, str) else Var(value)
            )
            args.append((key, arg))
        binding = Binding(out, mil_type(shape, dtype))
        self.operations.append(Operation(optype, (binding,), tuple(args), (("name", string(out)),)))
        return out

    def multi_op(
        self,
        optype: str,
        inputs: Mapping[str, str | None],
        outputs: Sequence[tuple[str, Sequence[int], str]],
    ) -> list[str]:
        """Append an op with several outputs given as (name, shape, dtype)."""
        args = tuple((k, Var(v)) for k, v in sorted(inputs.items()) if v is not None)
        bindings = tuple(Binding(n, mil_type(s, d)) for n, s, d in outputs)
        first = bindings[0].name
        self.operations.append(Operation(optype, bindings, args, (("name", string(first)),)))
        return [b.name for b in bindings]

    # --- constants -------------------------------------------------------------------------

    def param(self, hint: str, value: object, dtype: str | None = None, *, key: str = "") -> str:
        """A small named const (an op parameter), shared by every op that needs the same
        value for the same parameter ``key`` (``strides``, ``axis``, ...).

        ``value`` is a bool, int, float, str or a sequence/array; ``dtype`` the MIL dtype
        (default: bool, int32, the program's float, or string, from the value).
        """
        array = np.asarray(value)
        if dtype is None:
            kind = array.dtype.kind
            dtype = {"b": "bool", "i": "int32", "u": "int32", "f": self.float_dtype}.get(
                kind, "string"
            )
        if dtype == "string":
            literal: Scalar | Tensor = Scalar(ScalarType("string"), str(value))
            shared: tuple = (key, "string", str(value))
        else:
            typed = self._cast(array, dtype)
            literal = (
                Scalar(ScalarType(dtype), typed.item())
                if typed.ndim == 0
                else Tensor(MilTensorType(dtype, typed.shape), typed)
            )
            shared = (key, dtype, typed.shape, typed.tobytes())
        found = self._params.get(shared)
        if found is None:
            found = self._params[shared] = self._const(self.namer.fresh(hint), literal)
        return found

    def tensor(self, array: np.ndarray, hint: str, *, ir_name: str | None = None) -> str:
        """A tensor const carried in the program's types; large floats go to the weight.bin.

        ``ir_name`` (an IR constant's name) makes every use of that constant share one const.
        """
        if ir_name is not None and ir_name in self._tensors:
            return self._tensors[ir_name]
        array = np.asarray(array)
        floats = array.dtype.kind == "f"
        dtype = self.float_dtype if floats else self.dtype_of(DType(_ir_kind(array)))
        if floats and array.size >= BLOB_MIN_ELEMENTS:
            var = self._blob(array, hint, dtype)
        else:
            typed = self._cast(array, dtype)
            literal = (
                Scalar(ScalarType(dtype), typed.item())
                if typed.ndim == 0
                else Tensor(MilTensorType(dtype, typed.shape), typed)
            )
            var = self._const(self.namer.fresh(hint), literal)
            self._stored[var] = var
        if ir_name is not None:
            self._tensors[ir_name] = var
            self.ir_constants[self._stored[var]] = ir_name
        return var

    def compressed_weight(self, ir_name: str, hint: str) -> str:
        """The IR constant ``ir_name`` as its constexpr decompression op (once per function);
        blob operands go to the weight.bin in their own (sub-byte) types."""
        if ir_name in self._tensors:
            return self._tensors[ir_name]
        c = self.compressed[ir_name]
        inputs = {}
        for part in c.parts:
            name = self.namer.fresh(f"{hint}_{part.name}")
            if part.blob:
                data, padding = encode(part.array, part.dtype)
                offset = self.blobs.add_encoded(data, part.dtype, padding)
                value: Scalar | Tensor | BlobFile = BlobFile(
                    mil_type(part.array.shape, part.dtype), WEIGHT_PATH, offset
                )  # type: ignore[arg-type]
            elif part.array.ndim == 0:
                value = Scalar(ScalarType(part.dtype), part.array.item())
            else:
                value = Tensor(MilTensorType(part.dtype, part.array.shape), part.array)
            inputs[part.name] = self._const(name, value)
        var = self.op(c.op, inputs, c.dense.shape, "fp16", hint=hint)
        self._tensors[ir_name] = var
        return var

    def _blob(self, array: np.ndarray, hint: str, dtype: str) -> str:
        """A BLOBFILE const (converted on the executor when there is one); an fp32 program
        reading fp16 weights gets the const, then a cast to its type."""
        stored = self.weight_dtype if self.weight_dtype != dtype else dtype
        offset = self.blobs.add_pending(self.conversions.submit(array, stored), array.size, stored)
        shape = tuple(int(d) for d in array.shape)
        name = self.namer.fresh(f"{hint}_{stored}" if stored != dtype else hint)
        blob = self._const(name, BlobFile(mil_type(shape, stored), WEIGHT_PATH, offset))  # type: ignore[arg-type]
        self._stored[blob] = blob
        if stored == dtype:
            return blob
        cast = self.param(f"{hint}_dtype", dtype, "string", key="dtype")
        var = self.op("cast", {"x": blob, "dtype": cast}, shape, dtype, hint=hint)
        self._stored[var] = blob
        return var

    def _const(self, name: str, literal: Scalar | Tensor | BlobFile) -> str:
        self.operations.append(
            Operation(
                "const",
                (Binding(name, literal.type),),
                (),
                (("name", string(name)), ("val", literal)),
            )
        )
        return name

    def _cast(self, array: np.ndarray, dtype: str) -> np.ndarray:
        return cast_array(array, dtype)


def cast_array(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` as a C-ordered array of the MIL ``dtype``, element by element: floats round
    to nearest, saturating at fp16's largest finite value; integers are range-checked. An
    fp16 array (a language model's weights) is already fp16: it is used as it is, not copied."""
    if dtype == "fp16" and array.dtype == np.float16 and array.flags.c_contiguous:
        return array
    if dtype in ("fp16", "fp32"):
        wide = np.asarray(array, dtype=np.float32)
        if dtype == "fp16" and wide.size and _beyond_fp16(wide):
            # Orion section 7: finite values beyond fp16's range saturate, never turn to inf
            finite = np.isfinite(wide)
            wide = np.where(finite, np.clip(wide, -FP16_MAX, FP16_MAX), wide)
        if dtype == "fp16":
            return to_float16(wide)
        return np.array(wide, dtype=np.float32, order="C")
    if dtype == "int32" and array.size:
        low, high = int(np.min(array)), int(np.max(array))
        if low < -(2**31) or high >= 2**31:
            raise ModelError(
                f"an integer constant holds {low if low < -(2**31) else high}, outside "
                "MIL's int32 range"
            )
    return np.array(array, dtype=dtype_info(dtype).numpy_dtype, order="C")


def _beyond_fp16(array: np.ndarray) -> bool:
    """Any finite value outside fp16's range (two passes, no temporary array)."""
    with np.errstate(invalid="ignore"):
        high, low = np.nanmax(array), np.nanmin(array)
    finite_high = high > FP16_MAX and np.isfinite(high)
    finite_low = low < -FP16_MAX and np.isfinite(low)
    if finite_high or finite_low:
        return True
    if np.isinf(high) or np.isinf(low):  # infinities hide finite outliers from max/min
        finite = array[np.isfinite(array)]
        return bool(finite.size) and float(np.abs(finite).max()) > FP16_MAX
    return False


def _ir_kind(array: np.ndarray) -> str:
    """The IR dtype name of a non-float numpy array."""
    return {"bool": "bool", "int8": "int8", "uint8": "uint8", "int32": "int32"}.get(
        array.dtype.name, "int64"
    )
