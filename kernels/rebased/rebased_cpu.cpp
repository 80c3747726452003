// kernels/rebased/rebased_cpu.cpp — ReBased on the CPU over the feature-map engine of
// common/cpu/feature_map_cpu.h: parallel, chunk and recurrent forms, forward and backward.
#include <cmath>

#include "common/cpu/feature_map_cpu.h"
#include "rebased/rebased.h"

namespace lav::kernels {

/// FLA's parallel_rebased adds eps = 1e-5 (its default) to the normaliser.
constexpr double kRebasedNormEps = 1e-5;

feature_map::Args rebased_engine_args(const RebasedArgs& a) {
    feature_map::Args e;
    e.family = "rebased";
    e.score = feature_map::Score::rebased;
    e.q = a.q;
    e.k = a.k;
    e.v = a.v;
    e.cu_seqlens = a.cu_seqlens;
    e.layout = a.layout;
    const double K = a.q.defined() && a.q.dim() == 4 ? static_cast<double>(a.q.size(3)) : 1.0;
    e.scale = a.use_scale ? 1.0 / std::sqrt(K) : 1.0;
    e.normalise = a.use_normalize;
    e.eps = kRebasedNormEps;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    return e;
}

at::Tensor rebased_fwd_cpu(std::string_view variant, const RebasedArgs& args) {
    const feature_map::Args e = rebased_engine_args(args);
    (void)feature_map::contract(e, variant, false);  // rejects an unknown variant
    if (variant == "recurrent") return feature_map::recurrent_fwd(e);
    return feature_map::blocked_fwd(e, variant == "parallel");
}

RebasedGrads rebased_bwd_cpu(std::string_view variant, const RebasedArgs& args,
                             const at::Tensor& d_o) {
    const feature_map::Args e = rebased_engine_args(args);
    (void)feature_map::contract(e, variant, true);
    const feature_map::Grads g = variant == "recurrent"
                                     ? feature_map::recurrent_bwd(e, d_o)
                                     : feature_map::blocked_bwd(e, variant == "parallel", d_o);
    return {g.dq, g.dk, g.dv};
}

}  // namespace lav::kernels
