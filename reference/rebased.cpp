// reference/rebased.cpp — float64 ReBased over the shared quadratic and feature-map forms.
#include "rebased.h"

#include <cmath>

#include "feature_map_attn.h"

namespace lav::ref {
namespace {

feature_map_attn::Problem problem(const RebasedInputs& in) {
    const double K = in.q.defined() && in.q.dim() == 4 ? static_cast<double>(in.q.size(3)) : 1.0;
    return {"rebased",
            feature_map_attn::Score::rebased,
            in.q,
            in.k,
            in.v,
            in.cu_seqlens,
            in.use_scale ? 1.0 / std::sqrt(K) : 1.0,
            in.use_normalize,
            in.eps};
}

}  // namespace

at::Tensor rebased_fwd(const RebasedInputs& in) { return feature_map_attn::forward(problem(in)); }

RebasedGrads rebased_bwd(const RebasedInputs& in, const at::Tensor& d_o) {
    const feature_map_attn::Grads g = feature_map_attn::backward(problem(in), d_o);
    return {g.dq, g.dk, g.dv};
}

at::Tensor rebased_fwd_recurrent(const RebasedInputs& in) {
    return feature_map_attn::forward_recurrent(problem(in));
}

}  // namespace lav::ref
