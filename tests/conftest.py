"""Test-wide settings: the machine model's costs come from tecomp's table or its defaults,
never from a timing taken during the run (``TECOMP_CALIBRATE=0``; tests/test_calibrate.py
sets the mode it tests), so that a schedule does not depend on how busy the machine was.

A test (or a ``pytest.param``) marked ``@pytest.mark.slow`` is skipped unless
``TECOMP_LONG_TESTS=1``: the exhaustive variants of a matrix whose representative cases
run by default.

The parametrized tests of :data:`THINNED` keep one case in ``k`` by default (the first,
then every ``k``-th, in collection order, so every process of pytest-xdist keeps the same
ones): the suite's budget is about 15 minutes on two cores (CI), and these matrices
were its slowest; ``TECOMP_LONG_TESTS=1`` runs every case. ``k = 0``: the test (not a
matrix) runs only then. ``(k, m)``: a matrix of ``m`` cases under each value of an outer
parameter (the lanes, a switch, a dtype: whatever varies slowest in collection order)
keeps one case in ``k`` with the kept one shifted by one for each next value, so that
every case runs under one of the values and every value runs: case ``i`` is kept where
``(i % m + i // m) % k == 0``."""
import os

import pytest

os.environ.setdefault("TECOMP_CALIBRATE", "0")

# numpy's "bfloat16" (ml_dtypes') known in every test process, as tests write it
# (``x.astype("bfloat16")``); tecomp.testing imports it only where a program is run
from tecomp.testing.program import numpy_bfloat16  # noqa: E402

numpy_bfloat16()

LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")

#: ``path::function`` -> ``k``: the parametrized tests whose default run keeps one case in
#: ``k`` (0: none; the slowest matrices of the suite, CI of 2026-12-02)
THINNED = {
    "tests/test_aarch64.py::test_int8_gemm_on_dot_products_under_qemu": 3,
    "tests/test_align_bounds.py::test_gemm_column_edge_is_one_kernel": 3,
    "tests/test_autodiff_nn.py::test_conv_gradients_are_scheduled_as_convolutions": 3,
    "tests/test_autodiff_nn.py::test_conv_gradients_with_symbolic_batch_and_channels": 3,
    # float16 gradients: conv2d NCHW and NHWC (stride 1) and layer_norm kept; the stride-2
    # conv and dense by the long run
    "tests/test_autodiff_nn.py::test_float16_gradients_accumulate_in_float32": 2,
    # each size/form on stride 1 or 2, alternating
    "tests/test_autodiff_nn.py::test_large_nchw_weight_gradients": (2, 2),
    # each lanes count on stride 1 or 2, alternating
    "tests/test_autodiff_nn.py::test_narrow_nchw_data_gradient_phases_with_channel_vectors": (2, 2),
    "tests/test_autodiff_nn.py::test_narrow_nchw_data_gradients_run_as_nhwc_convolutions": 3,
    "tests/test_autodiff_nn.py::test_weight_gradients_over_panels": 3,
    "tests/test_autoschedule.py::test_analytic_schedule_is_correct": 3,
    "tests/test_autoschedule.py::test_random_knobs_are_correct": 3,
    "tests/test_autoschedule_cuda.py::test_gpu_rules_have_no_race": 2,
    "tests/test_autoschedule_cuda.py::test_gpu_rules_match_numpy_in_the_emulation": 3,
    # each training x layout x affine case in one dtype, float32 and float64 alternating
    "tests/test_batch_norm.py::test_batch_norm_matches_torch": (2, 2),
    # each shape with the pairs switch on or off, alternating
    "tests/test_codegen_llvm.py::test_column_argmax_nan_tests_in_pairs": (2, 2),
    # each shape with the registers switch on or off, alternating
    "tests/test_codegen_llvm.py::test_column_argmax_pairs_in_registers": (2, 2),
    # each shape with the pairs switch on or off, alternating
    "tests/test_codegen_llvm.py::test_column_max_min_nan_tests_in_pairs": (2, 2),
    # each shape with the matching switch on or off, alternating
    "tests/test_codegen_llvm.py::test_row_argmax_lanes_combined_by_matching": (2, 2),
    # (the same for integer values: each shape matched or as a tree, alternating)
    "tests/test_codegen_llvm.py::test_row_argmax_of_integers_lanes_combined_by_matching": (2, 2),
    # every function in float32 and float64, the float32 ones serial and the float64 ones
    # vectorized (the 28 cases of each mode shifted by one)
    "tests/test_codegen_llvm.py::test_unary_intrinsics_match_numpy": (2, 28),
    "tests/test_cuda_emu.py::test_examples_match_numpy": 3,
    "tests/test_flash_attention.py::test_flash_attention_matches_float64": 3,
    "tests/test_flash_attention.py::test_the_register_form_with_a_padding_mask": 3,
    # seeds of one generator: two of the four (four of the eight with the long tests)
    "tests/test_fuzz.py::test_fuzz_gpu_int8_gemms_with_dp4a": 2,
    "tests/test_fuzz.py::test_fuzz_seeds_with_torch_tensors_and_exported_libraries": 3,
    "tests/test_fuzz.py::test_fuzz_tensor_core_gemms_with_epilogues": 3,
    "tests/test_fuzz_edges.py::test_environment_family_finds_the_settings_the_old_code_got_wrong": 0,
    "tests/test_fuzz_edges.py::test_family_runs_clean": 3,
    # each change on the conv or the pooled conv, alternating
    "tests/test_fuzz_producers.py::test_a_padded_input_that_is_an_output_too": (2, 2),
    # each name under one or two of the three targets: the even ones in the IR and CUDA C,
    # the odd ones in LLVM IR (run); test_hostile_name_in_the_cuda_emulation keeps all six
    "tests/test_hostile_names.py::test_hostile_name_leaves_the_code_alone": (2, 3),
    # each layout with one of the two spellings, alternating
    "tests/test_nn_conv_groups.py::test_depthwise_data_gradient_is_a_depthwise_convolution": (2, 2),
    # each prefetched shape on 1 or 2 threads, alternating
    "tests/test_nn_conv_groups.py::test_depthwise_nchw_rows_prefetched": (2, 5),
    "tests/test_nn_conv_groups.py::test_depthwise_nhwc_border_rows_apart": 3,
    # every blocking x layout under one of the two lanes x threads pairs
    "tests/test_nn_conv_groups.py::test_depthwise_template_every_blocking": (2, 10),
    "tests/test_nn_conv_groups.py::test_forward_matches_torch": 3,
    "tests/test_nn_conv_groups.py::test_gpu_rules_in_the_emulation": 3,
    "tests/test_nn_conv_groups.py::test_gradcheck": 3,
    "tests/test_nn_conv_groups.py::test_gradients_match_torch": 3,
    "tests/test_nn_conv_groups.py::test_grouped_nchw_rows_fuse_multiply_adds": 3,
    # each interleaved case under one of the two lanes x threads pairs
    "tests/test_nn_conv_groups.py::test_grouped_nhwc_interleaved": (2, 4),
    "tests/test_nn_conv_groups.py::test_grouped_nhwc_interleaved_plane_tasks": 3,
    "tests/test_nn_conv_groups.py::test_grouped_nhwc_interleaved_shares_tap_broadcasts": 3,
    # each case under one of the two lanes x threads pairs
    "tests/test_nn_conv_groups.py::test_grouped_nhwc_interleaved_whole_vectors": (2, 3),
    # each case under 16 or 8 lanes, alternating
    "tests/test_nn_conv_groups.py::test_grouped_nhwc_vectors_across_groups": (2, 3),
    # each config in NCHW or NHWC, alternating
    "tests/test_nn_conv_groups.py::test_grouped_template_configs": (2, 2),
    "tests/test_nn_conv_groups.py::test_grouped_template_every_blocking": 3,
    "tests/test_nn_conv_groups.py::test_half_precision_sums_in_float32": 3,
    "tests/test_nn_conv_groups.py::test_nchw_rows_strided_masked_loads": 3,
    "tests/test_nn_conv_nd.py::test_conv2d_transpose_channel_vector_phases_pack_their_weights_once": 3,
    "tests/test_nn_conv_nd.py::test_conv2d_transpose_gradients_match_torch": 3,
    # each case in float64 or float32, alternating
    "tests/test_nn_conv_nd.py::test_conv2d_transpose_interleave_by_phase": (2, 2),
    "tests/test_nn_conv_nd.py::test_conv2d_transpose_matches_torch": 3,
    # each shape in NCDHW or NDHWC, alternating
    "tests/test_nn_conv_nd.py::test_conv3d_matches_torch": (2, 2),
    "tests/test_nn_conv_nd.py::test_conv3d_ncdhw_short_reduction_by_channels": 3,
    "tests/test_nn_conv_nd.py::test_conv3d_ncdhw_template_skips_the_padded_taps": 3,
    # each operator in float16 or bfloat16, alternating
    "tests/test_nn_conv_nd.py::test_conv_nd_half_sums_in_float32": (2, 2),
    "tests/test_nn_ops.py::test_forward_matches_numpy": 3,
    "tests/test_nn_ops.py::test_half_precision_reductions_accumulate_in_float32": 3,
    "tests/test_nn_pooling.py::test_adaptive_against_torch": 3,
    # max 1-D/3-D/2-D 150 and avg 2-D 128 kept; avg NHWC, adaptive, avg 150 by the long run
    "tests/test_nn_pooling.py::test_auto_schedule_uses_the_pooling_template": 2,
    # avg 256, max 264 padded, global 1040 kept; avg 200/300 and 3-D by the long run
    "tests/test_nn_pooling.py::test_channels_last_whole_pixels": 2,
    # the pairs (max2d, avg2d_nhwc), (max1d, avg3d), (adaptive_max2d, global_avg): first,
    # second, first kept (max, avg and adaptive; 2-D and 3-D)
    "tests/test_nn_pooling.py::test_cuda_emulation": (2, 2),
    # each plane size with avg or max, alternating
    "tests/test_nn_pooling.py::test_global_pooling_of_a_plane_in_vectors": (2, 2),
    # global avg/max, adaptive avg, the padded avg kept (5 of 10)
    "tests/test_nn_pooling.py::test_large_windows_over_narrow_rows": 2,
    # each window with -inf or -inf and NaN, alternating
    "tests/test_nn_pooling.py::test_max_gradient_with_minus_inf_data_matches_pytorch": (2, 2),
    # each shape with its padded window first or last (alternating), plain and auto
    "tests/test_nn_pooling.py::test_max_windows_on_padding_only_are_minus_inf": (2, 4),
    # the cases two by two, first, second, second, first...: avg k4, k3, excluding the pad,
    # NWC and max k8, padded kept (6 of 12)
    "tests/test_nn_pooling.py::test_pairs_first": (2, 2),
    # max 2-D, dilated, 1-D NWC; avg stride 1, asymmetric, 3-D excluding the pad kept (6 of 11)
    "tests/test_nn_pooling.py::test_peeled_pixels": 2,
    # max (padded, unpadded) and avg kept; ceil, k345 and exclude-pad by the long run
    "tests/test_nn_pooling.py::test_planes_first": 2,
    "tests/test_nn_pooling.py::test_pool_against_torch_and_numpy": 3,
    "tests/test_nn_pooling.py::test_separable_windows": 3,
    "tests/test_nn_pooling.py::test_short_padded_rows": 3,
    # max 2-D NHWC, 1-D max and avg kept; 3-D avg, max 1-D 65, max NHWC 24 by the long run
    "tests/test_nn_pooling.py::test_streamed_outputs": 2,
    "tests/test_nn_reductions_elementwise.py::test_elementwise_cuda_emu": 3,
    "tests/test_nn_reductions_elementwise.py::test_reduce_cuda_emu": 3,
    "tests/test_nn_schedule_cpu.py::test_conv2d_fused_epilogue": 3,
    "tests/test_nn_schedule_cpu.py::test_conv2d_nchw": 3,
    "tests/test_nn_schedule_cpu.py::test_conv2d_nchw_by_channels": 3,
    "tests/test_nn_schedule_cpu.py::test_conv2d_nchw_channel_vectors_weigh_the_weight_copy": 3,
    "tests/test_nn_schedule_cpu.py::test_conv2d_nhwc": 3,
    # each geometry under 16 or 8 lanes, alternating
    "tests/test_nn_schedule_cpu.py::test_conv2d_nhwc_reads_the_input_in_place_where_taps_are_skipped": (2, 6),
    "tests/test_nn_schedule_cpu.py::test_conv2d_nhwc_same_bits_on_any_thread_count": 3,
    "tests/test_nn_schedule_cpu.py::test_conv_thread_split_is_pinned_by_the_config": 3,
    "tests/test_nn_schedule_cpu.py::test_dense": 3,
    "tests/test_nn_schedule_cpu.py::test_gemm_threads_mode_runs_right": 3,
    "tests/test_nn_schedule_cpu.py::test_matmul": 3,
    "tests/test_nn_schedule_cpu.py::test_templates_schedule_half_precision_definitions": 3,
    "tests/test_nn_schedule_cuda.py::test_gpu_benchmark_workloads_check_out": 3,
    "tests/test_nn_winograd.py::test_forward_matches_torch_float64": 3,
    # (one case, F4 with group tasks, padding 2 and the epilogue: the 7x7-F4 case kept with
    # it before, F4 on (image, group) tasks, is test_grouped_nchw_channels_last_inf_and_nan's)
    "tests/test_nn_winograd.py::test_grouped_nchw_runs_channels_last": 4,
    "tests/test_nn_winograd.py::test_grouped_tasks_of_a_group_transform_its_weights": 3,
    "tests/test_nn_winograd.py::test_huge_finite_inputs_below_the_documented_bound_stay_finite": 3,
    "tests/test_reduce_rules.py::test_all_any_over_every_axis_combination_of_bool_bytes": 3,
    # each axis with argmax or argmin, alternating
    "tests/test_reduce_rules.py::test_argmax_combines_elements_in_order_without_index_tests": (2, 2),
    "tests/test_reduce_rules.py::test_argmax_rows_in_blocks_of_rows": 3,
    "tests/test_reduce_rules.py::test_argmax_starts_at_its_first_element": 3,
    # each axis with argmax or argmin, alternating
    "tests/test_reduce_rules.py::test_int64_argmax_counts_in_int32_where_the_positions_fit": (2, 2),
    "tests/test_reduce_rules.py::test_row_argmax_prefetches_the_rows_ahead": 3,
    "tests/test_reduce_rules.py::test_selections_prefetch_their_own_distance": 3,
    # each variant on llvm or the interpreter, alternating
    "tests/test_scan.py::test_rnn_cell": (2, 2),
    "tests/test_skinny_gemm.py::test_a_at_w_streams_each_thread_s_columns": 3,
    "tests/test_skinny_gemm.py::test_each_fma_loads_its_vector_of_w": 3,
    "tests/test_skinny_gemm.py::test_plain_skinny_gemm_streams_w_in_place": 3,
    "tests/test_te_corpus.py::test_corpus_against_numpy": 3,
    "tests/test_tensorcore.py::test_template_matches_numpy_in_the_emulation": 3,
    "tests/test_tensorcore_edges.py::test_odd_shapes_match_float64_in_the_emulation": 2,
    "tests/test_tensorcore_epilogue.py::test_fused_epilogue_matches_torch_in_the_emulation": 3,
    "tests/test_torch.py::test_nn_op_gradients_equal_torch_autograd_float64": 3,
}


def pytest_collection_modifyitems(config, items):
    if LONG:
        return
    skip = pytest.mark.skip(reason="slow: set TECOMP_LONG_TESTS=1")
    thin = pytest.mark.skip(reason="one case in k by default (conftest.THINNED): set "
                            "TECOMP_LONG_TESTS=1")
    seen = {}
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
            continue
        key = f"{item.nodeid.split('::')[0]}::{getattr(item, 'originalname', item.name)}"
        k = THINNED.get(key)
        if k is None:
            continue
        i = seen[key] = seen.get(key, -1) + 1
        if isinstance(k, tuple):
            k, m = k
            i = i % m + i // m
        if k == 0 or i % k:
            item.add_marker(thin)
