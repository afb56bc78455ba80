"""Lines of Apple's own model.mil output (coremlc), parsed and printed back character for character.

The lines are quoted from coremltools 9.0's test-suite, which asserts them against the
``model.mil`` that Apple's compiler writes into a compiled model (``test/blob/test_weights.py``,
``test/ml_program/test_utils.py``, ``converters/mil/backend/mil/test_load.py``): both the older
``tensor<string, []>`` spelling and the newer ``string(...)`` one.
"""

from __future__ import annotations

import pytest

from anekit.formats.mil import BlobFile, MilTensorType, format_operation, parse, print_program

LEGACY = [
    'tensor<fp32, [500]> const_1 = const()[name = tensor<string, []>("const_1"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))];',
    'tensor<fp32, [500]> const_2 = const()[name = tensor<string, []>("const_2"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))];',
    'tensor<fp32, [500]> const_3 = const()[name = tensor<string, []>("const_3"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(2176)))];',
]
MODERN = [
    'tensor<fp32, [500]> const_3 = const()[name = string("const_3"), val = tensor<fp32, [500]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];',
    'tensor<fp32, [500]> const_2 = const()[name = string("const_2"), val = tensor<fp32, [500]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(2176)))];',
    'tensor<fp32, [500]> const_1 = const()[name = string("const_1"), val = tensor<fp32, [500]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];',
    'tensor<fp16, [5, 6272]> linear1_linear1_weight_to_fp16 = const()[name = string("linear1_linear1_weight_to_fp16"), val = tensor<fp16, [5, 6272]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(576)))];',
    'tensor<fp16, [5, 6272]> linear1_linear1_weight_to_fp16 = const()[name = string("linear1_linear1_weight_to_fp16"), val = tensor<fp16, [5, 6272]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(63360)))];',
    'tensor<fp16, [5, 6272]> linear1_weight_to_fp16 = const()[name = string("linear1_weight_to_fp16"), val = tensor<fp16, [5, 6272]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(576)))];',
]  # fmt: skip
# Fragments (not whole lines) of the same outputs.
FRAGMENTS = [
    'constexpr_sparse_blockwise_shift_scale(data_mask = tensor<uint1, [32, 32]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))',
    'constexpr_sparse_to_dense(mask = tensor<uint1, [32, 32]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))',
    "add(x = x, y = const_1)",
    "add(x = add_0, y = const_2)",
]  # fmt: skip


def wrap(line: str, version: str = "1.3", opset: str = "ios18") -> str:
    name = line.split(" = ", 1)[0].split()[-1]
    return f"program({version})\n{{\n    func main<{opset}>() {{\n        {line}\n    }} -> ({name});\n}}\n"


@pytest.mark.parametrize("line", MODERN)
def test_modern_lines_print_back_exactly(line: str):
    text = wrap(line)
    program = parse(text)
    op = program.function().operations[0]
    assert isinstance(op.attribute("val"), BlobFile)
    assert format_operation(op) == line
    assert print_program(program) == text


@pytest.mark.parametrize("line", LEGACY)
def test_legacy_lines_print_back_exactly_in_legacy_spelling(line: str):
    text = wrap(line, "1.0", "ios16")
    program = parse(text)
    op = program.function().operations[0]
    assert op.attribute("val").type == MilTensorType("fp32", (500,))
    assert op.name == line.split('"')[1]
    assert format_operation(op, legacy_scalars=True) == line
    assert print_program(program, legacy_scalars=True) == text


def test_fragments_appear_verbatim_in_printed_programs():
    blob_mask = FRAGMENTS[0].split("data_mask = ", 1)[1]
    text = (
        "program(1.3)\n{\n"
        "    func main<ios18>(tensor<fp32, [500]> x, tensor<int8, [32]> nz) {\n"
        + "".join(f"        {line}\n" for line in MODERN[2::-1])
        + '        tensor<fp32, [500]> add_0 = add(x = x, y = const_1)[name = string("add_0")];\n'
        + '        tensor<fp32, [500]> add_1 = add(x = add_0, y = const_2)[name = string("add_1")];\n'
        + "        tensor<int8, [32, 32]> w = constexpr_sparse_blockwise_shift_scale("
        + f'data_mask = {blob_mask}, nonzero_data = nz)[name = string("w")];\n'
        + "        tensor<int8, [32, 32]> d = constexpr_sparse_to_dense("
        + f'mask = {blob_mask}, nonzero_data = nz)[name = string("d")];\n'
        + "    } -> (add_1, w, d);\n}\n"
    )
    program = parse(text)
    printed = print_program(program)
    assert printed == text
    for fragment in FRAGMENTS:
        assert fragment in printed
    mask = program.function().producers["w"].input("data_mask")
    assert mask == BlobFile(MilTensorType("uint1", (32, 32)), "@model_path/weights/weight.bin", 64)
