"""The simulator's op declarations against Apple's: coremltools' registry of MIL op definitions.

For every op the simulator runs, the newest (iOS 18) definition in coremltools must have the
same inputs, each with the same optionality, constness, tuple-ness and accepted dtypes. The
few deliberate differences are listed in ``DIFFERENCES`` with their reason.
"""

from __future__ import annotations

import pytest

from anekit.simulator import supported_ops
from anekit.simulator.ops import REGISTRY

ct_registry = pytest.importorskip("coremltools.converters.mil.mil.ops.registry")
ct_input_type = pytest.importorskip("coremltools.converters.mil.mil.input_type")
ct_types = pytest.importorskip("coremltools.converters.mil.mil.types")

DIFFERENCES = {
    # iOS 16's forms (packed indices / mask bytes with an explicit shape) are kept next to
    # iOS 18's: one op name, two input sets
    ("constexpr_lut_to_dense", "shape"): "iOS 16 form",
    ("constexpr_sparse_to_dense", "shape"): "iOS 16 form",
    ("constexpr_sparse_to_dense", "mask"): "iOS 16 form takes uint8 bytes",
    # coremltools declares them plain tuples, its docs and type inference need constants
    ("reshape_like", "begins"): "must be const",
    ("reshape_like", "ends"): "must be const",
    ("reshape_like", "end_masks"): "must be const",
}


def newest(name: str):
    versions = ct_registry.SSAOpRegistry.core_ops[name]
    return versions[max(versions, key=lambda v: v.value)]


def ct_dtypes(cls, spec) -> set[str] | None:
    if not isinstance(spec, ct_input_type.TensorInputType):
        return None
    if spec.type_domain_id is not None:
        domain = cls.type_domains[spec.type_domain_id]
    elif spec.type_domain is not None:
        domain = spec.type_domain if isinstance(spec.type_domain, tuple) else (spec.type_domain,)
    else:
        return None
    return {ct_types.builtin_to_string(t) for t in domain}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_inputs_match_coremltools_definitions(name: str) -> None:
    cls = newest(name)
    theirs = dict(cls.input_spec.input_types)
    ours = REGISTRY[name].params_by_name
    extra = {k for k in ours if k not in theirs and (name, k) not in DIFFERENCES}
    assert not extra and set(theirs) <= set(ours), (sorted(theirs), sorted(ours))
    for key, spec in theirs.items():
        if (name, key) in DIFFERENCES:
            continue
        p = ours[key]
        assert (p.optional, p.const) == (spec.optional, spec.const), key
        assert p.variadic == isinstance(spec, ct_input_type.TupleInputType), key
        dtypes = ct_dtypes(cls, spec)
        if dtypes is not None:
            assert set(REGISTRY[name].allowed(p)) == dtypes, key


def test_the_issue_list_is_covered() -> None:
    wanted = """conv matmul linear add sub mul real_div pow sqrt rsqrt exp log tanh sigmoid relu gelu
        erf softmax reduce_sum reduce_mean reduce_max reduce_min reduce_prod reshape transpose
        concat split slice_by_index slice_by_size layer_norm batch_norm instance_norm avg_pool
        max_pool upsample_nearest_neighbor cast select clip gather floor_div mod maximum minimum
        equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor
        logical_not abs inverse square sign floor ceil round sin cos atan leaky_relu elu prelu
        softplus softsign silu relu6 sigmoid_hard thresholded_relu linear_activation scaled_tanh
        clamped_relu einsum conv_transpose l2_norm local_response_norm l2_pool gather_along_axis
        gather_nd squeeze expand_dims tile pad band_part topk cumsum fill range_1d one_hot
        upsample_bilinear resize_bilinear resize_nearest_neighbor crop
        scaled_dot_product_attention constexpr_affine_dequantize constexpr_blockwise_shift_scale
        constexpr_lut_to_dense identity""".split()
    assert not set(wanted) - set(supported_ops())
