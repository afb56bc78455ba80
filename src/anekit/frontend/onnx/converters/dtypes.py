"""ONNX element-type codes as IR dtypes."""

from __future__ import annotations

import onnx

from anekit.errors import ModelError
from anekit.frontend.onnx.loader import onnx_type_name
from anekit.ir.dtypes import DType

ONNX_DTYPES: dict[int, DType] = {
    onnx.TensorProto.FLOAT: DType.FP32,
    onnx.TensorProto.FLOAT16: DType.FP16,
    onnx.TensorProto.INT8: DType.INT8,
    onnx.TensorProto.UINT8: DType.UINT8,
    onnx.TensorProto.INT32: DType.INT32,
    onnx.TensorProto.INT64: DType.INT64,
    onnx.TensorProto.BOOL: DType.BOOL,
}


def ir_dtype(code: int, what: str) -> DType:
    try:
        return ONNX_DTYPES[code]
    except KeyError:
        raise ModelError(
            f"{what} is {onnx_type_name(code)}; anekit supports fp32, fp16, int8, uint8, int32, int64 and bool"
        ) from None
