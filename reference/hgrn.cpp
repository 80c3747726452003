// reference/hgrn.cpp — float64 hgrn: the recurrence, its checkpointed reverse, and the closed form
// that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "hgrn.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "hgrn";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::rows;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, K, N;
};

// the closed form's elementwise blocks hold at most this many doubles (16 MiB)
constexpr int64_t kBlockElements = int64_t{1} << 21;

Dims check_inputs(const HgrnInputs& in) {
    LAV_ASSERT(in.x.defined() && in.g.defined(), "hgrn reference called without x or g");
    assert_fp64(kFamily, in.x, "x");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.x.dim() == 4, "hgrn: x must be [B, T, H, K], got ", in.x.sizes());
    Dims d{};
    d.B = in.x.size(0);
    d.T = in.x.size(1);
    d.H = in.x.size(2);
    d.K = in.x.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.H > 0 && d.K > 0, "hgrn: H and K must be positive, got H = ", d.H, ", K = ", d.K);
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.H, d.K});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K});
    return d;
}

// The state before the first step of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K}, opts);
}

// h ← exp(g_t) ⊙ h + x_t, overwriting `state` ([H, K]); `decay` is exp(g) of the sequence.
void step_inplace(at::Tensor& state, const at::Tensor& decay, const at::Tensor& x, int64_t t) {
    state.mul_(decay.select(0, t)).add_(x.select(0, t));
}

}  // namespace

HgrnOutputs hgrn_fwd(const HgrnInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.x.options();
    at::Tensor o = at::zeros_like(in.x);               // [B, T, H, K]
    at::Tensor ht = at::empty({d.N, d.H, d.K}, opts);  // [N, H, K]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const at::Tensor x = rows(in.x, seq);                         // [L, H, K]
        const at::Tensor decay = rows(in.g, seq).exp();               // [L, H, K]
        const at::Tensor o_seq = rows(o, seq);                        // [L, H, K]
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K]
        for (int64_t t = 0; t < seq.length(); ++t) {
            step_inplace(state, decay, x, t);
            // o_t = h_t
            o_seq.select(0, t).copy_(state);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht};
}

HgrnGrads hgrn_bwd(const HgrnInputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "hgrn reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.K});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K});
    const at::TensorOptions opts = in.x.options();

    HgrnGrads grads;
    grads.dx = at::zeros_like(in.x);                                    // [B, T, H, K]
    grads.dg = at::zeros_like(in.g);                                    // [B, T, H, K]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, d.H, d.K}, opts);  // [N, H, K]

    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor x = rows(in.x, seq);            // [L, H, K]
        const at::Tensor decay = rows(in.g, seq).exp();  // [L, H, K]
        const at::Tensor dO = rows(d_o, seq);            // [L, H, K]
        const at::Tensor dx = rows(grads.dx, seq);       // [L, H, K]
        const at::Tensor dg = rows(grads.dg, seq);       // [L, H, K]
        // [H, K] the gradient w.r.t. the current state, from the future
        at::Tensor dh =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({d.H, d.K}, opts);
        if (L > 0) {
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, d.H, d.K}, opts);  // [NS, H, K]
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);         // [H, K]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                step_inplace(state, decay, x, t);
            }
            // states[i] is h_{start+i-1}: the segment's entering state, then its c states
            at::Tensor states = at::empty({c + 1, d.H, d.K}, opts);  // [c + 1, H, K]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c;
                const int64_t end = std::min(start + c, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [H, K]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, decay, x, t);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor h_prev = states.select(0, t - start);  // [H, K]
                    const at::Tensor decay_t = decay.select(0, t);          // [H, K]
                    // dh_t = d_o_t + (the future's gradient through h_{t+1})
                    dh.add_(dO.select(0, t));
                    // dx_t = dh_t
                    dx.select(0, t).copy_(dh);
                    // dg_t = exp(g_t) ⊙ h_{t-1} ⊙ dh_t
                    at::Tensor dg_t = dg.select(0, t);  // [H, K]
                    at::mul_out(dg_t, h_prev, dh).mul_(decay_t);
                    // h_t = exp(g_t) ⊙ h_{t-1} + …, so the step before sees exp(g_t) ⊙ dh_t
                    dh.mul_(decay_t);
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dh);
    }
    return grads;
}

HgrnOutputs hgrn_fwd_parallel(const HgrnInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.x.options();
    at::Tensor o = at::zeros_like(in.x);               // [B, T, H, K]
    at::Tensor ht = at::empty({d.N, d.H, d.K}, opts);  // [N, H, K]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor h0 =
            in.h0.defined() ? in.h0.select(0, seq.index) : at::zeros({d.H, d.K}, opts);  // [H, K]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const at::Tensor x = rows(in.x, seq);                         // [L, H, K]
        const at::Tensor G = rows(in.g, seq).cumsum(0);               // [L, H, K]
        const at::Tensor o_seq = rows(o, seq);                        // [L, H, K]
        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));  // [L]
        // h_t = exp(G_t) h0 + Σ_{s≤t} exp(G_t − G_s) x_s, elementwise in [R, L, H, K] blocks of
        // R rows; −inf before the exp makes the future exactly 0 rather than exp of a large
        // positive number times a 0 mask
        const int64_t R = std::max<int64_t>(1, kBlockElements / (L * d.H * d.K));
        for (int64_t t0 = 0; t0 < L; t0 += R) {
            const int64_t rows_here = std::min(R, L - t0);
            const at::Tensor G_t = G.narrow(0, t0, rows_here).unsqueeze(1);  // [R, 1, H, K]
            // future[t, s] is true for s > t
            const at::Tensor future = (idx.unsqueeze(0) > idx.narrow(0, t0, rows_here).unsqueeze(1))
                                          .view({rows_here, L, 1, 1});  // [R, L, 1, 1]
            const at::Tensor D = (G_t - G.unsqueeze(0))
                                     .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                     .exp_();  // [R, L, H, K]
            o_seq.narrow(0, t0, rows_here)
                .copy_(D.mul_(x.unsqueeze(0)).sum(1).add_(G_t.squeeze(1).exp() * h0));
        }
        ht.select(0, seq.index).copy_(o_seq.select(0, L - 1));
    }
    return {o, ht};
}

}  // namespace lav::ref
