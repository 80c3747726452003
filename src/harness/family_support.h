// src/harness/family_support.h — what the family declarations share: the reference's result
// maps and the validation rules several families make. Nothing family-specific lives here.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/family.h"

namespace lav::harness {

/// True when the case's boolean option `name` is "true".
bool flag(const scenario::Case& c, const std::string& name);

/// Value heads: shape.HV, or H when the case leaves it unset (0).
int64_t value_heads(const scenario::Case& c);

/// The generator the case draws `name` with: its [inputs] entry, else `fallback`.
scenario::Generator generator_of(const scenario::Case& c, const std::string& name,
                                 const scenario::Generator& fallback = {});

template <class Inputs, class = void>
struct keeps_states : std::false_type {};
template <class Inputs>
struct keeps_states<Inputs, std::void_t<decltype(Inputs::state_stride)>> : std::true_type {};

/// Sets what every reference's Inputs takes from the call: cu_seqlens and the scale, and the
/// state stride (the chunk size when the call keeps chunk states) where the reference has one.
template <class Inputs>
void set_common_inputs(Inputs& r, const Call& c) {
    r.cu_seqlens = c.cu_seqlens;
    r.scale = c.scale;
    if constexpr (keeps_states<Inputs>::value)
        r.state_stride = c.keep_chunk_states ? c.chunk_size : 0;
}

/// Adds the defined tensors of `named` to `out`: a pass's optional results (dh0 without h0,
/// dg without a gate) are left out rather than stored undefined.
void add_defined(TensorMap& out, const TensorMap& named);

/// Flags a shape.HV other than H, for families with one value head per query head.
void check_one_value_head(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// Flags value heads HV that are not a multiple of H (grouped value attention).
void check_grouped_value_heads(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// Flags allow_neg_eigval without use_beta_sigmoid_in_kernel, which FLA refuses.
void check_neg_eigval(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

/// ‖x‖² of a K-vector drawn by `gen`, in expectation: scale²·K for randn and ones, a third
/// of that for rand, 0 for zeros.
double expected_norm2(const scenario::Generator& gen, int64_t K);

/// Whether the case draws its inputs from generators: a capture or an op call hands them in,
/// and checks of how inputs are drawn do not apply.
bool draws_inputs(const scenario::Case& c);

/// Flags delta-rule keys that diverge as drawn: without use_qk_l2norm_in_kernel the step
/// I − β k kᵀ has the eigenvalue 1 − β‖k‖², which leaves (−1, 1) once ‖k‖² > 2 for β < 1.
void check_unnormalised_keys(std::vector<scenario::FamilyIssue>& issues, const scenario::Case& c);

}  // namespace lav::harness
