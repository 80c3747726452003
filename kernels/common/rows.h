// kernels/common/rows.h — what every family's rows share: the call's common settings as
// kernel arguments, and a family's variants made into rows.
//
//   void add_gla_cpu_rows(RowTable& table) {
//       add_rows<GlaArgs>(table, {"gla", "cpu", "cpu"}, gla_args, gla_contract,
//                         {{"chunk", gla_chunk_fwd_cpu, gla_chunk_bwd_cpu}, ...});
//   }
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/row.h"

namespace lav::kernels {

template <class Args, class = void>
struct has_scale : std::false_type {};
template <class Args>
struct has_scale<Args, std::void_t<decltype(Args::scale)>> : std::true_type {};
template <class Args, class = void>
struct keeps_chunk_states : std::false_type {};
template <class Args>
struct keeps_chunk_states<Args, std::void_t<decltype(Args::keep_chunk_states)>> : std::true_type {};

/// Sets the arguments every family's Args has from the call: cu_seqlens, layout, the state
/// and output dtypes and the chunk size; the scale and keep_chunk_states where Args has them.
template <class Args>
void set_common_args(Args& a, const Call& call) {
    a.cu_seqlens = call.cu_seqlens_tensor();
    a.layout = call.layout;
    a.state_dtype = call.state_dtype;
    a.output_dtype = call.output_dtype;
    a.chunk_size = call.chunk_size;
    if constexpr (has_scale<Args>::value) a.scale = call.scale;
    if constexpr (keeps_chunk_states<Args>::value) a.keep_chunk_states = call.keep_chunk_states;
}

/// Where a family's rows run and under which backend name.
struct RowPlace {
    std::string family;
    std::string backend;
    std::string device;
    /// A row of `variant` here, its kernels still to set.
    Row row(const std::string& variant) const {
        Row r;
        r.family = family;
        r.variant = variant;
        r.backend = backend;
        r.device = device;
        return r;
    }
};

/// One variant's kernels: a forward (Args) -> Fwd and a backward (Args, d_o, dht) -> Grads,
/// the signature of most families.
template <class Args, class Fwd, class Grads>
struct Variant {
    const char* name;
    Fwd (*forward)(const Args&);
    Grads (*backward)(const Args&, const at::Tensor& d_o, const at::Tensor& dht);
};

/// A row from functions over the family's Args: `results` turns a Fwd or Grads into named
/// tensors (an overload set, found where the family declares its result types).
template <class Args, class Forward, class Backward, class Contract>
Row make_row(const RowPlace& place, const std::string& variant, Args (*args_of)(const Call&),
             Contract contract, Forward forward, Backward backward) {
    Row r = place.row(variant);
    r.forward = [=](const Call& c) { return results(forward(args_of(c))); };
    r.backward = [=](const Call& c) { return results(backward(args_of(c), c)); };
    r.contract = [=](const Call& c, bool backward_pass) {
        return contract(variant, backward_pass, args_of(c));
    };
    return r;
}

/// Adds a row per variant for a family whose backward takes (Args, d_o, dht); `fits`, when
/// set, says which calls its kernels take.
template <class Args, class Fwd, class Grads>
void add_rows(RowTable& table, const RowPlace& place, Args (*args_of)(const Call&),
              PrecisionContract (*contract)(std::string_view, bool, const Args&),
              const std::vector<Variant<Args, Fwd, Grads>>& variants,
              const std::function<bool(const Call&)>& fits = {}) {
    for (const auto& v : variants) {
        Row r = make_row(place, v.name, args_of, contract, v.forward,
                         [bwd = v.backward](const Args& a, const Call& c) {
                             return bwd(a, c.need("d_o"), c.need("dht"));
                         });
        r.fits = fits;
        table.add(std::move(r));
    }
}

/// Adds a row per variant for a family without a state whose kernels take the variant by name:
/// forward (variant, Args) -> o, backward (variant, Args, d_o) -> Grads (based, rebased).
template <class Args, class Grads>
void add_named_variant_rows(RowTable& table, const RowPlace& place,
                            const std::vector<std::string>& variants, Args (*args_of)(const Call&),
                            PrecisionContract (*contract)(std::string_view, bool, const Args&),
                            at::Tensor (*forward)(std::string_view, const Args&),
                            Grads (*backward)(std::string_view, const Args&, const at::Tensor&)) {
    for (const std::string& variant : variants) {
        Row r = place.row(variant);
        r.forward = [=](const Call& c) { return TensorMap{{"o", forward(variant, args_of(c))}}; };
        r.backward = [=](const Call& c) {
            return results(backward(variant, args_of(c), c.need("d_o")));
        };
        r.contract = [=](const Call& c, bool backward_pass) {
            return contract(variant, backward_pass, args_of(c));
        };
        table.add(std::move(r));
    }
}

}  // namespace lav::kernels
