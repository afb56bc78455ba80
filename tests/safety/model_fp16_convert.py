"""fp16 versions of ONNX models, converted the way onnxconverter-common's
``convert_float_to_float16`` does (written here: that package is not a dependency).

``keep_io_types=False`` makes every float tensor fp16, I/O included (an all-fp16 model);
``True`` keeps fp32 inputs and outputs and casts them to and from the fp16 interior.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _fp16_tensor(t: TensorProto) -> TensorProto:
    if t.data_type != F32:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)


def to_fp16(model: onnx.ModelProto, *, keep_io_types: bool = False) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for i, t in enumerate(g.initializer):
        g.initializer[i].CopyFrom(_fp16_tensor(t))
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(_fp16_tensor(a.t))
            elif node.op_type == "Cast" and a.name == "to" and a.i == F32:
                a.i = F16
    del g.value_info[:]
    casts_in, casts_out = [], []
    for vi in g.input:
        if vi.type.tensor_type.elem_type != F32:
            continue
        if not keep_io_types:
            vi.type.tensor_type.elem_type = F16
            continue
        inner = f"{vi.name}__fp16"
        for node in g.node:
            node.input[:] = [inner if x == vi.name else x for x in node.input]
        casts_in.append(helper.make_node("Cast", [vi.name], [inner], to=F16))
    for vo in g.output:
        if vo.type.tensor_type.elem_type != F32:
            continue
        if not keep_io_types:
            vo.type.tensor_type.elem_type = F16
            continue
        inner = f"{vo.name}__fp16"
        for node in g.node:
            node.output[:] = [inner if x == vo.name else x for x in node.output]
            node.input[:] = [inner if x == vo.name else x for x in node.input]
        casts_out.append(helper.make_node("Cast", [inner], [vo.name], to=F32))
    nodes = [*casts_in, *g.node, *casts_out]
    del g.node[:]
    g.node.extend(nodes)
    return m
