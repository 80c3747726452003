// src/harness/family_support.h — what the family adapters share: options, scale, tensor specs,
// result collection, the chunk states they hand to --dump-intermediates and the checks several
// families make. Nothing family-specific lives here.
//
// An adapter describes its tensors with these pieces and keeps only what is its own:
//
//   std::vector<TensorSpec> specs = qkv_specs(c, c.H);
//   if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
//   ...
//   set_common_args(args, c);
//   result.results = head_last_results(c, measured(c, backward), {{"o", f.o}, {"ht", f.ht}});
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "harness/registry.h"

namespace lav::harness {

/// True when the case's boolean option `name` is "true".
bool flag(const scenario::Case& c, const std::string& name);

/// The case's integer option `name` (gsa's slots, gated_delta_product's num_householder).
int64_t int_option(const scenario::Case& c, const std::string& name);

/// The case's scale, K^-0.5 when the scenario leaves it out (FLA's default).
double scale_of(const scenario::Case& c);

/// Value heads: shape.HV, or H when the case leaves it unset (0).
int64_t value_heads(const scenario::Case& c);

/// The generator the case draws `name` with: its [inputs] entry, else `fallback`.
scenario::Generator generator_of(const scenario::Case& c, const std::string& name,
                                 const scenario::Generator& fallback = {});

/// c.cu_seqlens as the int64 tensor the kernels take; undefined for a dense batch.
at::Tensor cu_seqlens_tensor(const scenario::Case& c);

/// Sets the kernel arguments every family has from the case: cu_seqlens, layout, the state
/// and output dtypes and the chunk size.
template <class Args>
void set_common_args(Args& a, const scenario::Case& c) {
    a.cu_seqlens = cu_seqlens_tensor(c);
    a.layout = c.layout;
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;
}

/// q and k [B, T, H, K] drawn with `qk`, v [B, T, HV, V] drawn as randn, in the input dtype.
std::vector<TensorSpec> qkv_specs(const scenario::Case& c, int64_t HV,
                                  const scenario::Generator& qk = {});

/// A randn state [N, HV, K, V] in the state dtype, one per sequence (h0, dht).
TensorSpec kv_state_spec(const scenario::Case& c, const std::string& name, int64_t HV);

/// d_o [B, T, HV, V] and dht [N, HV, K, V]: the cotangents of a family whose forward pass
/// returns o and one final state ht.
std::vector<TensorSpec> output_state_cotangents(const scenario::Case& c, int64_t HV);

/// o and ht: what the forward pass of a one-state family measures.
std::vector<MeasuredSpec> output_state_measured();

/// dq, dk, dv, then `gate_grads`: the per-token gradients most backward passes start with.
std::vector<MeasuredSpec> qkv_grads_measured(const std::vector<std::string>& gate_grads = {});

/// Adds the defined tensors of `named` to `out`: a pass's optional results (dh0 without h0,
/// dg without a gate) are left out rather than stored undefined.
void add_defined(TensorMap& out, const TensorMap& named);

/// A backend's results for the runner: each measured tensor of `results` that is defined,
/// converted to head_last order from the case's layout when it has a time axis (time_dim ≥ 0);
/// states and parameter gradients are layout-free and pass as they are.
TensorMap head_last_results(const scenario::Case& c, const std::vector<MeasuredSpec>& measured,
                            const TensorMap& results);

/// Family::chunk_states for a family whose CPU chunk forward takes keep_chunk_states and
/// returns h, and whose reference takes state_stride and returns states: `a` and `r` are the
/// arguments its run_cpu and reference build for the case's inputs.
template <class Args, class ChunkFwd, class RefInputs, class RefFwd>
ChunkStates stored_chunk_states(const scenario::Case& c, Args a, ChunkFwd chunk_fwd, RefInputs r,
                                RefFwd ref_fwd, int64_t steps = 1) {
    a.keep_chunk_states = true;
    r.state_stride = c.chunk_size;
    return {chunk_fwd(a).h, ref_fwd(r).states, steps};
}

/// True for "chunk", false for "recurrent"; any other variant is a registry bug.
bool is_chunk(const std::string& family, const std::string& variant);

/// Flags a shape.HV other than H, for families with one value head per query head.
void check_one_value_head(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// Flags value heads HV that are not a multiple of H (grouped value attention).
void check_grouped_value_heads(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// Flags allow_neg_eigval without use_beta_sigmoid_in_kernel, which FLA refuses.
void check_neg_eigval(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// ‖x‖² of a K-vector drawn by `gen`, in expectation: scale²·K for randn and ones, a third
/// of that for rand, 0 for zeros.
double expected_norm2(const scenario::Generator& gen, int64_t K);

/// Flags delta-rule keys that diverge as drawn: without use_qk_l2norm_in_kernel the step
/// I − β k kᵀ has the eigenvalue 1 − β‖k‖², which leaves (−1, 1) once ‖k‖² > 2 for β < 1.
void check_unnormalised_keys(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

}  // namespace lav::harness
