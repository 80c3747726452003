// reference/rwkv7.cpp — float64 rwkv7 (DPLR and IPLR): the recurrence, its checkpointed reverse,
// and the chunkwise form that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "rwkv7.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "rwkv7";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::rows;
using common::StateSamples;

struct Dims {
    int64_t B, T, H, K, V, N;
    double scale;  // resolved: never 0
};

Dims check_inputs(const Rwkv7Inputs& in) {
    LAV_ASSERT(
        in.q.defined() && in.k.defined() && in.v.defined() && in.a.defined() && in.b.defined(),
        "rwkv7 reference called without q, k, v, a or b");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.w, "w");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.a, "a");
    assert_fp64(kFamily, in.b, "b");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "rwkv7: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0, "rwkv7: K and V must be positive, got K = ", d.K, ", V = ", d.V);
    const std::vector<int64_t> key_shape = {d.B, d.T, d.H, d.K};
    check_shape(kFamily, in.k, "k", key_shape);
    check_shape(kFamily, in.a, "a", key_shape);
    check_shape(kFamily, in.b, "b", key_shape);
    if (in.w.defined()) check_shape(kFamily, in.w, "w", key_shape);
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// One sequence's inputs as [L, H, D] views.
struct SequenceInputs {
    at::Tensor q, k, a, b;  // [L, H, K]
    at::Tensor v;           // [L, H, V]
    at::Tensor decay;       // [L, H, K] exp(w); undefined for IPLR
};

SequenceInputs sequence_inputs(const Rwkv7Inputs& in, const Sequence& seq) {
    SequenceInputs s{rows(in.q, seq), rows(in.k, seq), rows(in.a, seq),
                     rows(in.b, seq), rows(in.v, seq), {}};
    if (in.w.defined()) s.decay = rows(in.w, seq).exp();
    return s;
}

// One step for every head, in place on `state` ([H, K, V]): ha = S_{t-1}ᵀ a_t (written to
// `ha`, [H, V]), then S ← diag(exp(w_t))·S + b_t haᵀ + k_t v_tᵀ. The products are elementwise
// ops and reductions, not bmm: at these sizes that keeps every op on the calling thread.
void step_inplace(at::Tensor& state, at::Tensor& ha, at::Tensor& scratch, const SequenceInputs& s,
                  int64_t t) {
    at::mul_out(scratch, state, s.a.select(0, t).unsqueeze(2));
    at::sum_out(ha, scratch, 1);
    if (s.decay.defined()) state.mul_(s.decay.select(0, t).unsqueeze(2));
    state.addcmul_(s.b.select(0, t).unsqueeze(2), ha.unsqueeze(1));
    state.addcmul_(s.k.select(0, t).unsqueeze(2), s.v.select(0, t).unsqueeze(1));
}

// [H, C, C] Σ_d x_id y_jd exp(X_id − Y_jd), kept where `keep` ([C, C]) is true and exactly 0
// elsewhere (masked to −∞ before the exp, so never exp(large) · 0).
at::Tensor decayed_scores(const at::Tensor& x, const at::Tensor& X, const at::Tensor& y,
                          const at::Tensor& Y, const at::Tensor& keep) {
    const int64_t C = x.size(1);
    const at::Tensor D = (X.unsqueeze(2) - Y.unsqueeze(1))
                             .masked_fill_(keep.logical_not().view({1, C, C, 1}),
                                           -std::numeric_limits<double>::infinity())
                             .exp_();  // [H, C, C, K]
    return D.mul_(x.unsqueeze(2)).mul_(y.unsqueeze(1)).sum(3);
}

}  // namespace

Rwkv7Outputs rwkv7_fwd(const Rwkv7Inputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const at::Tensor q_scaled = in.q * d.scale;             // [B, T, H, K]
    at::Tensor o = at::zeros_like(in.v);                    // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(in, seq);
        const at::Tensor qs = rows(q_scaled, seq);                    // [L, H, K]
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        at::Tensor scratch = at::empty({d.H, d.K, d.V}, opts);        // [H, K, V]
        at::Tensor ha = at::empty({d.H, d.V}, opts);                  // [H, V]
        const at::Tensor o_seq = rows(o, seq);                        // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, ha, scratch, s, t);
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, scratch, state, qs.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

Rwkv7Grads rwkv7_bwd(const Rwkv7Inputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "rwkv7 reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;

    Rwkv7Grads grads;
    grads.dq = at::zeros_like(in.q);                                       // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                       // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                       // [B, T, H, V]
    grads.da = at::zeros_like(in.a);                                       // [B, T, H, K]
    grads.db = at::zeros_like(in.b);                                       // [B, T, H, K]
    if (in.w.defined()) grads.dw = at::zeros_like(in.w);                   // [B, T, H, K]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]

    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(in, seq);
        const at::Tensor dO = rows(do_scaled, seq);  // [L, H, V]
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            const at::Tensor dq = rows(grads.dq, seq);            // [L, H, K]
            const at::Tensor dk = rows(grads.dk, seq);            // [L, H, K]
            const at::Tensor dv = rows(grads.dv, seq);            // [L, H, V]
            const at::Tensor da = rows(grads.da, seq);            // [L, H, K]
            const at::Tensor db = rows(grads.db, seq);            // [L, H, K]
            at::Tensor scratch = at::empty({H, d.K, d.V}, opts);  // [H, K, V]
            at::Tensor ha = at::empty({H, d.V}, opts);            // [H, V]
            at::Tensor gb = at::empty({H, d.V}, opts);            // [H, V]
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every P-th step
            const int64_t P = ceil_sqrt(L);
            const int64_t num_segments = (L + P - 1) / P;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);  // [NS, H, K, V]
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);            // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % P == 0) checkpoints.select(0, t / P).copy_(state);
                step_inplace(state, ha, scratch, s, t);
            }
            // states[i] is S_{start+i-1}; has[i] the ha of step start + i
            at::Tensor states = at::empty({P + 1, H, d.K, d.V}, opts);  // [P + 1, H, K, V]
            at::Tensor has = at::empty({P, H, d.V}, opts);              // [P, H, V]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * P;
                const int64_t end = std::min(start + P, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [H, K, V]
                    at::Tensor ha_t = has.select(0, t - start);         // [H, V]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, ha_t, scratch, s, t);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor S_t = states.select(0, t - start + 1);  // [H, K, V]
                    const at::Tensor S_prev = states.select(0, t - start);   // [H, K, V]
                    const at::Tensor ha_t = has.select(0, t - start);        // [H, V]
                    const at::Tensor do_t = dO.select(0, t);                 // [H, V]
                    // dq_t = scale·S_t d_o_t; then dS becomes ∂L/∂S_t
                    at::Tensor dq_t = dq.select(0, t);  // [H, K]
                    contract_out(dq_t, scratch, S_t, do_t.unsqueeze(1), 2);
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    at::Tensor dk_t = dk.select(0, t);  // [H, K]
                    contract_out(dk_t, scratch, dS, s.v.select(0, t).unsqueeze(1), 2);
                    at::Tensor dv_t = dv.select(0, t);  // [H, V]
                    contract_out(dv_t, scratch, dS, s.k.select(0, t).unsqueeze(2), 1);
                    // S_t = (D_t + b_t a_tᵀ) S_{t-1} + …: the transition's gradient is
                    // dS_t S_{t-1}ᵀ, so db_t = dS_t ha_t and da_t = S_{t-1} (dS_tᵀ b_t)
                    at::Tensor db_t = db.select(0, t);  // [H, K]
                    contract_out(db_t, scratch, dS, ha_t.unsqueeze(1), 2);
                    contract_out(gb, scratch, dS, s.b.select(0, t).unsqueeze(2), 1);
                    at::Tensor da_t = da.select(0, t);  // [H, K]
                    contract_out(da_t, scratch, S_prev, gb.unsqueeze(1), 2);
                    if (s.decay.defined()) {
                        // dw_t[d] = exp(w_t[d])·⟨S_{t-1}[d, :], dS_t[d, :]⟩
                        const at::Tensor decay_t = s.decay.select(0, t);     // [H, K]
                        at::Tensor dw_t = rows(grads.dw, seq).select(0, t);  // [H, K]
                        contract_out(dw_t, scratch, S_prev, dS, 2);
                        dw_t.mul_(decay_t);
                        dS.mul_(decay_t.unsqueeze(2));
                    }
                    // ∂L/∂S_{t-1} = (D_t + a_t b_tᵀ) dS_t: D_t dS_t above, a_t gbᵀ here
                    dS.addcmul_(s.a.select(0, t).unsqueeze(2), gb.unsqueeze(1));
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    return grads;
}

Rwkv7Outputs rwkv7_fwd_chunkwise(const Rwkv7Inputs& in, int64_t chunk) {
    const Dims d = check_inputs(in);
    LAV_CHECK(chunk >= 1, "rwkv7: chunk must be positive, got ", chunk);
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;
    at::Tensor o = at::zeros_like(in.v);                  // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        at::Tensor S = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        for (int64_t c0 = seq.begin; c0 < seq.end; c0 += chunk) {
            const int64_t C = std::min(chunk, seq.end - c0);
            const Sequence part{seq.index, seq.batch, c0, c0 + C};
            const auto load = [&](const at::Tensor& t) { return rows(t, part).permute({1, 0, 2}); };
            const at::Tensor q = load(in.q) * d.scale;                             // [H, C, K]
            const at::Tensor k = load(in.k);                                       // [H, C, K]
            const at::Tensor a = load(in.a);                                       // [H, C, K]
            const at::Tensor b = load(in.b);                                       // [H, C, K]
            const at::Tensor v = load(in.v);                                       // [H, C, V]
            const at::Tensor w = in.w.defined() ? load(in.w) : at::zeros_like(k);  // [H, C, K]
            const at::Tensor Gi = w.cumsum(1);  // [H, C, K] inclusive, chunk-local
            const at::Tensor Ge = Gi - w;       // [H, C, K] exclusive
            const at::Tensor upto = at::ones({C, C}, opts.dtype(at::kBool)).tril();
            const at::Tensor before = at::ones({C, C}, opts.dtype(at::kBool)).tril(-1);

            // S_i = diag(e^{Gi_i}) S + Σ_{j≤i} diag(e^{Gi_i − Gi_j}) (b_j ha_jᵀ + k_j v_jᵀ), so
            // ha_i = S_{i-1}ᵀ a_i = (a_i ⊙ e^{Ge_i})ᵀ S + Σ_{j<i} [A_ab ha + A_ak v]_i: a unit
            // lower triangular system (I − A_ab) ha = A_ak v + (a ⊙ e^{Ge}) S
            const at::Tensor A_ab = decayed_scores(a, Ge, b, Gi, before);        // [H, C, C]
            const at::Tensor A_ak = decayed_scores(a, Ge, k, Gi, before);        // [H, C, C]
            const at::Tensor rhs = at::bmm(A_ak, v) + at::bmm(a * Ge.exp(), S);  // [H, C, V]
            const at::Tensor eye = at::eye(C, opts).unsqueeze(0);
            const at::Tensor ha = at::linalg_solve_triangular(eye - A_ab, rhs, /*upper=*/false,
                                                              /*left=*/true,
                                                              /*unitriangular=*/true);  // [H, C, V]

            const at::Tensor A_qk = decayed_scores(q, Gi, k, Gi, upto);  // [H, C, C]
            const at::Tensor A_qb = decayed_scores(q, Gi, b, Gi, upto);  // [H, C, C]
            const at::Tensor O = at::bmm(A_qk, v) + at::bmm(A_qb, ha) + at::bmm(q * Gi.exp(), S);
            rows(o, part).copy_(O.permute({1, 0, 2}));

            const at::Tensor G_last = Gi.select(1, C - 1);               // [H, K]
            const at::Tensor to_end = (G_last.unsqueeze(1) - Gi).exp();  // [H, C, K]
            S = G_last.exp().unsqueeze(2) * S + at::bmm((k * to_end).transpose(1, 2), v) +
                at::bmm((b * to_end).transpose(1, 2), ha);
        }
        ht.select(0, seq.index).copy_(S);
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
