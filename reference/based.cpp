// reference/based.cpp — float64 Based over the shared quadratic and feature-map forms.
#include "based.h"

#include <cmath>

#include "feature_map_attn.h"

namespace lav::ref {
namespace {

feature_map_attn::Problem problem(const BasedInputs& in) {
    const double K = in.q.defined() && in.q.dim() == 4 ? static_cast<double>(in.q.size(3)) : 1.0;
    return {"based",
            feature_map_attn::Score::based,
            in.q,
            in.k,
            in.v,
            in.cu_seqlens,
            in.scale == 0.0 ? 1.0 / std::sqrt(K) : in.scale,
            in.use_norm,
            kBasedNormEps};
}

}  // namespace

at::Tensor based_fwd(const BasedInputs& in) { return feature_map_attn::forward(problem(in)); }

BasedGrads based_bwd(const BasedInputs& in, const at::Tensor& d_o) {
    const feature_map_attn::Grads g = feature_map_attn::backward(problem(in), d_o);
    return {g.dq, g.dk, g.dv};
}

at::Tensor based_fwd_recurrent(const BasedInputs& in) {
    return feature_map_attn::forward_recurrent(problem(in));
}

}  // namespace lav::ref
