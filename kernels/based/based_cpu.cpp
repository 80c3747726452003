// kernels/based/based_cpu.cpp — Based on the CPU over the feature-map engine of
// common/cpu/feature_map_cpu.h: parallel, chunk and recurrent forms, forward and backward.
#include <cmath>

#include "based/based.h"
#include "common/cpu/feature_map_cpu.h"

namespace lav::kernels {

/// FLA's parallel_based adds 1e-6 to the normaliser.
constexpr double kBasedNormEps = 1e-6;

feature_map::Args based_engine_args(const BasedArgs& a) {
    feature_map::Args e;
    e.family = "based";
    e.score = feature_map::Score::based;
    e.q = a.q;
    e.k = a.k;
    e.v = a.v;
    e.cu_seqlens = a.cu_seqlens;
    e.layout = a.layout;
    const double K = a.q.defined() && a.q.dim() == 4 ? static_cast<double>(a.q.size(3)) : 1.0;
    e.scale = a.scale != 0.0 ? a.scale : 1.0 / std::sqrt(K);
    e.normalise = a.use_norm;
    e.eps = kBasedNormEps;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    return e;
}

at::Tensor based_fwd_cpu(std::string_view variant, const BasedArgs& args) {
    const feature_map::Args e = based_engine_args(args);
    (void)feature_map::contract(e, variant, false);  // rejects an unknown variant
    if (variant == "recurrent") return feature_map::recurrent_fwd(e);
    return feature_map::blocked_fwd(e, variant == "parallel");
}

BasedGrads based_bwd_cpu(std::string_view variant, const BasedArgs& args, const at::Tensor& d_o) {
    const feature_map::Args e = based_engine_args(args);
    (void)feature_map::contract(e, variant, true);
    const feature_map::Grads g = variant == "recurrent"
                                     ? feature_map::recurrent_bwd(e, d_o)
                                     : feature_map::blocked_bwd(e, variant == "parallel", d_o);
    return {g.dq, g.dk, g.dv};
}

}  // namespace lav::kernels
