// kernels/comba/comba_cpu.cpp — Comba on the CPU through LibTorch: chunk (WY form) and recurrent
// variants, forward and backward, with the contract's rounding points. Uses the tensor helpers
// of common/cpu/delta_chunk.h; the algorithms here differ from delta_rule's by the auxiliary key p
// and the pre-decay correction. Not a reference.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "comba/comba.h"
#include "common/cpu/delta_chunk.h"

namespace lav::kernels {
namespace {

using namespace delta::detail;

delta::Args engine_args(const CombaArgs& a) {
    delta::Args e;
    e.family = "comba";
    e.q = a.q;
    e.k = a.k;
    e.v = a.v;
    e.g = a.g;
    e.beta = a.beta;
    e.h0 = a.h0;
    e.cu_seqlens = a.cu_seqlens;
    e.layout = a.layout;
    e.scale = a.scale;
    e.l2norm = a.use_qk_l2norm_in_kernel;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    return e;
}

/// The shared checks plus Comba's own: a gate, an auxiliary key like k, one value head per head.
struct CombaProblem {
    Problem base;
    at::Tensor p;  // [B, T, H, K] head_last view
};

CombaProblem make_comba_problem(const CombaArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.g.defined() && a.p.defined(), "comba cpu needs p and g");
    CombaProblem cp{make_problem(engine_args(a), chunked), at::Tensor()};
    const Problem& p = cp.base;
    check_float_cpu(p.name, a.p, "p");
    LAV_CHECK(a.p.scalar_type() == p.in, "comba cpu: p must have q's dtype ",
              scalar_type_name(p.in), ", got ", scalar_type_name(a.p.scalar_type()));
    LAV_CHECK(a.p.sizes() == a.k.sizes(), "comba cpu: p must have k's shape ", a.k.sizes(),
              ", got ", a.p.sizes());
    LAV_CHECK(p.HV == p.H, "comba cpu: v must have q's number of heads (", p.H, "), got ", p.HV);
    cp.p = to_head_last(a.p, a.layout);
    return cp;
}

/// Σ_{r ≤ i} x_r along each row of [H, L]: a running fp32 sum (at::cumsum accumulates fp32 in
/// double on the CPU).
at::Tensor running_sum(const at::Tensor& x) {
    at::Tensor out = at::empty_like(x);
    const int64_t rows = x.size(0), L = x.size(1);
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t i = 0; i < L; ++i) op[r * L + i] = acc += xp[r * L + i];
    }
    return out;
}

/// The factors of the exclusive cumsum Gx = G − g that the correction reads (the state before
/// step i has decayed by exp(Gx_i) since the chunk start).
struct ExclusiveGates {
    at::Tensor decay;   // [H, L] exp(Gx_i)
    at::Tensor strict;  // [H, L, L] exp(Gx_i − G_j) for j < i, else 0
};

ExclusiveGates exclusive_gates(const at::Tensor& g) {
    const int64_t L = g.size(1);
    const at::Tensor G = running_sum(g);  // [H, L]
    const at::Tensor Gx = G - g;          // [H, L]
    const at::Tensor not_below = at::ones({L, L}, at::kBool).triu();
    // mask before exp: above the diagonal the exponent can be positive and overflow
    return {Gx.exp(), (Gx.unsqueeze(2) - G.unsqueeze(1))
                          .masked_fill_(not_below, -std::numeric_limits<float>::infinity())
                          .exp_()};
}

/// One chunk's inputs, gates and WY form, rounded where the contract stores them.
struct Chunk {
    ChunkInputs in;    // q, k (normalised), v, β, g for every head
    Normalised pn;     // [H, L, K] p, normalised rows rounded to the input dtype
    ChunkGates gates;  // inclusive decay factors
    ExclusiveGates xg;
    at::Tensor A;   // [H, L, L] β_i (p_i·k_j) exp(Gx_i − G_j), j < i, fp32
    at::Tensor Ti;  // [H, L, L] (I + A)⁻¹ stored in the input dtype
    at::Tensor pb;  // [H, L, K] p ⊙ β exp(Gx), input dtype
    at::Tensor vb;  // [H, L, V] v ⊙ β, input dtype
    at::Tensor w;   // [H, L, K] Ti pb, input dtype
    at::Tensor u;   // [H, L, V] Ti vb, input dtype
};

Chunk load_comba_chunk(const CombaProblem& cp, int64_t b, int64_t c0, int64_t c1) {
    const Problem& p = cp.base;
    const int64_t L = c1 - c0;
    Chunk c;
    c.in = load_chunk(p, b, c0, c1);
    c.pn = normalise(load_rows(cp.p, b, c0, c1), p.l2norm, p.in);
    c.gates = chunk_gates(p, c.in.g, L);
    c.xg = exclusive_gates(c.in.g);
    const at::Tensor& pv = c.pn.x;
    // FLA keeps the kkt-like A in fp32 and rounds the solved inverse to k's dtype
    c.A = at::bmm(pv, c.in.kv.transpose(1, 2)).mul_(c.xg.strict).mul_(c.in.beta.unsqueeze(2));
    const at::Tensor eye = at::eye(L, at::kFloat).expand({p.H, L, L}).contiguous();
    c.Ti = round_to(at::linalg_solve_triangular(c.A + eye, eye, /*upper=*/false, /*left=*/true,
                                                /*unitriangular=*/true),
                    p.in);
    c.pb = round_to(pv * (c.in.beta * c.xg.decay).unsqueeze(2), p.in);
    c.vb = round_to(c.in.v * c.in.beta.unsqueeze(2), p.in);
    c.w = round_to(at::bmm(c.Ti, c.pb), p.in);
    c.u = round_to(at::bmm(c.Ti, c.vb), p.in);
    return c;
}

// ---- recurrent steps on one head's [K, V] fp32 state ----

/// u = β (v − Sᵀ p); S ← a S + k uᵀ; with q given, o = Sᵀ (scale q). `r`, `u` are [V] scratch
/// holding v − Sᵀ p and u on return.
void step(float* S, const float* k, const float* v, const float* pk, float a, float beta, int64_t K,
          int64_t V, float* r, float* u, const float* q = nullptr, float scale = 0.0f,
          float* o = nullptr) {
    std::copy(v, v + V, r);
    for (int64_t i = 0; i < K; ++i) {
        const float* Si = S + i * V;
        const float pi = pk[i];
        for (int64_t j = 0; j < V; ++j) r[j] -= pi * Si[j];
    }
    for (int64_t j = 0; j < V; ++j) u[j] = beta * r[j];
    if (o) std::fill(o, o + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ki = k[i];
        for (int64_t j = 0; j < V; ++j) Si[j] = a * Si[j] + ki * u[j];
        if (o) {
            const float qi = scale * q[i];
            for (int64_t j = 0; j < V; ++j) o[j] += qi * Si[j];
        }
    }
}

/// One head of one sequence, widened; q, k, p normalised in fp32 without rounding, as FLA's
/// recurrent kernels inline the norm.
struct Lane {
    Normalised q, k, p;  // [L, K]
    at::Tensor v;        // [L, V]
    at::Tensor beta;     // [L]
    at::Tensor decay;    // [L] exp(g)
};

Lane load_lane(const CombaProblem& cp, const Sequence& s, int64_t h) {
    const Problem& p = cp.base;
    const auto rows = [&](const at::Tensor& x) {
        return widen(x[s.batch].slice(0, s.begin, s.end).select(1, h));
    };
    return {normalise(rows(p.q), p.l2norm, at::kFloat),
            normalise(rows(p.k), p.l2norm, at::kFloat),
            normalise(rows(cp.p), p.l2norm, at::kFloat),
            rows(p.v),
            rows(p.beta),
            rows(p.g).exp().contiguous()};
}

/// Runs lane_fn(sequence, head) over every pair, in parallel; each writes disjoint elements.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    at::parallel_for(0, p.N * p.H, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j) lane_fn(p.seqs[j / p.H], j % p.H);
    });
}

/// The results of a backward pass, NaN-poisoned in the caller's layout, with head_last views.
struct Outputs {
    GradViews views;
    at::Tensor dp_hl;
};

Outputs allocate(const CombaProblem& cp, const CombaArgs& a, CombaGrads& out, delta::Grads& g) {
    const Problem& p = cp.base;
    Outputs o{allocate_grads(p, engine_args(a), g),
              poisoned_hl({p.B, p.T, p.H, p.K}, p.layout, p.in, out.dp)};
    return o;
}

CombaGrads finish(CombaGrads out, const delta::Grads& g) {
    out.dq = g.dq;
    out.dk = g.dk;
    out.dv = g.dv;
    out.dg = g.dg;
    out.dbeta = g.dbeta;
    out.dh0 = g.dh0;
    return out;
}

}  // namespace

CombaFwd comba_chunk_fwd_cpu(const CombaArgs& args) {
    const CombaProblem cp = make_comba_problem(args, /*chunked=*/true);
    const Problem& p = cp.base;
    CombaFwd out;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.layout, p.out, out.o);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.H, p.K, p.V},
                                    p.state);
    for_each_sequence(p, [&](const Sequence& s) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index);  // [H, K, V]
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            const Chunk c = load_comba_chunk(cp, s.batch, c0, c1);
            const at::Tensor h = round_to(S, p.state);  // [H, K, V]
            kept.store(s, c0, h);
            const at::Tensor v_new = round_to(c.u - at::bmm(c.w, h), p.in);       // [H, L, V]
            at::Tensor o = at::bmm(c.in.qv, h).mul_(c.gates.decay.unsqueeze(2));  // [H, L, V]
            // the masked, decayed scores are cast to v's dtype before A·v_new (FLA's chunk_fwd_o)
            const at::Tensor scores =
                round_to(at::bmm(c.in.qv, c.in.kv.transpose(1, 2)).mul_(c.gates.intra), p.in);
            o.baddbmm_(scores, v_new).mul_(p.scale);
            store_rows(o_hl, s.batch, c0, c1, o);
            S = advance(p, S, c.in, c.gates, v_new);
        }
        out.ht[s.index].copy_(S);
    });
    out.h = kept.h();
    return out;
}

CombaGrads comba_chunk_bwd_cpu(const CombaArgs& args, const at::Tensor& d_o,
                               const at::Tensor& dht) {
    const CombaProblem cp = make_comba_problem(args, /*chunked=*/true);
    const Problem& p = cp.base;
    const at::Tensor do_hl = check_cotangents(p, engine_args(args), d_o, dht);  // [B, T, H, V]
    CombaGrads result;
    delta::Grads grads;
    const Outputs outs = allocate(cp, args, result, grads);
    const GradViews& views = outs.views;
    const float scale = p.scale;

    for_each_sequence(p, [&](const Sequence& s) {
        const auto chunks = chunks_of(s, p.chunk);
        // forward: the stored chunk states h and new values v_new, in the contract's dtypes
        std::vector<at::Tensor> h_stored(chunks.size());      // [H, K, V] state dtype
        std::vector<at::Tensor> v_new_stored(chunks.size());  // [H, L, V] input dtype
        at::Tensor S = start_state(p, s.index);               // [H, K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            const Chunk ch = load_comba_chunk(cp, s.batch, chunks[c].first, chunks[c].second);
            h_stored[c] = S.to(p.state);
            const at::Tensor v_new =
                round_to(ch.u - at::bmm(ch.w, h_stored[c].to(at::kFloat)), p.in);
            v_new_stored[c] = v_new.to(p.in);
            S = advance(p, S, ch.in, ch.gates, v_new);
        }

        // reverse: dS = ∂L/∂(state at the end of chunk c) in fp32; each chunk reads its stored
        // copy dH in the state dtype
        at::Tensor dS = dht.defined() ? widen(dht[s.index])
                                      : at::zeros({p.H, p.K, p.V}, at::kFloat);  // [H, K, V]
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            const int64_t L = c1 - c0;
            const Chunk ch = load_comba_chunk(cp, s.batch, c0, c1);
            const ChunkInputs& in = ch.in;
            const at::Tensor& pv = ch.pn.x;                                    // [H, L, K]
            const at::Tensor h = h_stored[c].to(at::kFloat);                   // [H, K, V]
            const at::Tensor v_new = v_new_stored[c].to(at::kFloat);           // [H, L, V]
            const at::Tensor dH = round_to(dS, p.state);                       // [H, K, V]
            const at::Tensor d_out = load_rows(do_hl, s.batch, c0, c1);        // [H, L, V]
            const at::Tensor to_end = ch.gates.to_end.unsqueeze(2);            // [H, L, 1]
            const at::Tensor q_scale = (ch.gates.decay * scale).unsqueeze(2);  // [H, L, 1]

            // the output and state passes, exactly as the gated delta rule's (scores in fp32)
            const at::Tensor qk = at::bmm(in.qv, in.kv.transpose(1, 2)).mul_(ch.gates.intra);
            const at::Tensor dov =
                at::bmm(d_out, v_new.transpose(1, 2)).mul_(ch.gates.intra).mul_(scale);
            const at::Tensor d_vnew =
                at::baddbmm(at::bmm(in.kv, dH).mul_(to_end), qk.transpose(1, 2), d_out, 1.0, scale);
            const at::Tensor dq =
                at::baddbmm(at::bmm(d_out, h.transpose(1, 2)).mul_(q_scale), dov, in.kv);
            const at::Tensor dk_intra = at::bmm(dov.transpose(1, 2), in.qv);  // [H, L, K]
            const at::Tensor dk_inter = at::bmm(v_new, dH.transpose(1, 2)).mul_(to_end);
            dS = at::baddbmm(dS * ch.gates.last, (in.qv * q_scale).transpose(1, 2), d_out);
            dS.baddbmm_(ch.w.transpose(1, 2), d_vnew, 1.0, -1.0);

            // through w = Ti pb and u = Ti vb, then Ti = (I + A)⁻¹: dA = −Tiᵀ dT Tiᵀ (strict)
            const at::Tensor dw = at::bmm(d_vnew, h.transpose(1, 2)).neg_();  // [H, L, K]
            const at::Tensor dT = at::baddbmm(at::bmm(dw, ch.pb.transpose(1, 2)), d_vnew,
                                              ch.vb.transpose(1, 2));  // [H, L, L]
            const at::Tensor Tt = ch.Ti.transpose(1, 2);
            const at::Tensor dpb = at::bmm(Tt, dw);      // [H, L, K]
            const at::Tensor dvb = at::bmm(Tt, d_vnew);  // [H, L, V]
            const at::Tensor dA = at::bmm(at::bmm(Tt, dT), Tt).neg_().tril_(-1);
            // A_ij = β_i (p_i·k_j) Dx_ij: with M = dA ⊙ Dx, dp += diag(β) M k, dk += Mᵀ diag(β) p
            const at::Tensor M = dA * ch.xg.strict;  // [H, L, L]
            const at::Tensor beta = in.beta.unsqueeze(2);
            const at::Tensor beta_decay = in.beta * ch.xg.decay;  // [H, L]
            const at::Tensor dp = dpb * beta_decay.unsqueeze(2) + at::bmm(M, in.kv).mul_(beta);
            const at::Tensor dk =
                dk_intra + dk_inter + at::bmm(M.transpose(1, 2), pv * beta);  // [H, L, K]
            const at::Tensor dv = dvb * beta;                                 // [H, L, V]
            const at::Tensor pb_dot = (dpb * pv).sum(2);                      // [H, L]
            const at::Tensor dbeta = pb_dot * ch.xg.decay + (dvb * in.v).sum(2) +
                                     (M * at::bmm(pv, in.kv.transpose(1, 2))).sum(2);

            // ∂L/∂G_i (inclusive) from the output and state passes and A's columns, ∂L/∂Gx_i
            // (exclusive) from pb and A's rows; g_t feeds G_i for i ≥ t and Gx_i for i > t
            const at::Tensor F = dA * ch.A;  // [H, L, L]
            at::Tensor dG = (in.qv * dq).sum(2) - (in.kv * (dk_intra + dk_inter)).sum(2) - F.sum(1);
            const at::Tensor dGx = pb_dot * beta_decay + F.sum(2);  // [H, L]
            dG.select(1, L - 1).add_(ch.gates.last.view({p.H}) * (h * dH).sum({1, 2}) +
                                     (in.kv * dk_inter).sum({1, 2}));
            if (L > 1) dG.narrow(1, 0, L - 1).add_(dGx.narrow(1, 1, L - 1));
            reverse_cumsum_inplace(dG);

            store_rows(views.dq, s.batch, c0, c1, normalise_backward(in.q, dq));
            store_rows(views.dk, s.batch, c0, c1, normalise_backward(in.k, dk));
            store_rows(outs.dp_hl, s.batch, c0, c1, normalise_backward(ch.pn, dp));
            store_rows(views.dv, s.batch, c0, c1, dv);
            store_rows(views.dbeta, s.batch, c0, c1, dbeta);
            store_rows(views.dg, s.batch, c0, c1, dG);
        }
        if (p.h0.defined()) grads.dh0[s.index].copy_(dS);
    });
    return finish(result, grads);
}

CombaFwd comba_recurrent_fwd_cpu(const CombaArgs& args) {
    const CombaProblem cp = make_comba_problem(args, /*chunked=*/false);
    const Problem& p = cp.base;
    CombaFwd out;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.layout, p.out, out.o);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(cp, s, h);
        const int64_t L = s.length(), K = p.K, V = p.V;
        // the state lives in fp32 for the whole sequence
        at::Tensor S = lane_start(p, s.index, h);      // [K, V]
        at::Tensor o = at::empty({L, V}, at::kFloat);  // [L, V]
        std::vector<float> r(V), u(V);
        const float *q = lane.q.x.data_ptr<float>(), *k = lane.k.x.data_ptr<float>();
        const float *pk = lane.p.x.data_ptr<float>(), *v = lane.v.data_ptr<float>();
        const float *beta = lane.beta.data_ptr<float>(), *a = lane.decay.data_ptr<float>();
        float* op = o.data_ptr<float>();
        for (int64_t t = 0; t < L; ++t)
            step(S.data_ptr<float>(), k + t * K, v + t * V, pk + t * K, a[t], beta[t], K, V,
                 r.data(), u.data(), q + t * K, p.scale, op + t * V);
        o_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

CombaGrads comba_recurrent_bwd_cpu(const CombaArgs& args, const at::Tensor& d_o,
                                   const at::Tensor& dht) {
    const CombaProblem cp = make_comba_problem(args, /*chunked=*/false);
    const Problem& p = cp.base;
    const at::Tensor do_hl = check_cotangents(p, engine_args(args), d_o, dht);  // [B, T, H, V]
    CombaGrads result;
    delta::Grads grads;
    const Outputs outs = allocate(cp, args, result, grads);
    const GradViews& views = outs.views;
    const int64_t K = p.K, V = p.V;

    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(cp, s, h);
        const int64_t L = s.length();
        const at::Tensor d_out = widen(do_hl[s.batch].slice(0, s.begin, s.end).select(1, h));
        const float *q = lane.q.x.data_ptr<float>(), *k = lane.k.x.data_ptr<float>();
        const float *pk = lane.p.x.data_ptr<float>(), *v = lane.v.data_ptr<float>();
        const float *beta = lane.beta.data_ptr<float>(), *a = lane.decay.data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();
        // w.r.t. the normalised q̂, k̂, p̂
        at::Tensor dq = at::zeros({L, K}, at::kFloat), dk = at::empty({L, K}, at::kFloat);
        at::Tensor dpk = at::empty({L, K}, at::kFloat), dv = at::empty({L, V}, at::kFloat);
        at::Tensor dbeta = at::empty({L}, at::kFloat), dg = at::empty({L}, at::kFloat);
        float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>();
        float *dpp = dpk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
        float *dbp = dbeta.data_ptr<float>(), *dgp = dg.data_ptr<float>();
        std::vector<float> r(V), u(V), du(V), dpr(V);

        // forward: dq̂_t = scale·S_t do_t, keeping the state before every P-th step, so the
        // reverse pass holds O(√L) states
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        at::Tensor checkpoints = at::empty({segments, K, V}, at::kFloat);   // [segments, K, V]
        at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
        at::Tensor S = lane_start(p, s.index, h);                           // [K, V]
        float *Sp = S.data_ptr<float>(), *ckp = checkpoints.data_ptr<float>();
        float* bp = before.data_ptr<float>();
        for (int64_t t = 0; t < L; ++t) {
            if (t % P == 0) std::copy(Sp, Sp + K * V, ckp + (t / P) * K * V);
            step(Sp, k + t * K, v + t * V, pk + t * K, a[t], beta[t], K, V, r.data(), u.data());
            for (int64_t i = 0; i < K; ++i)
                dqp[t * K + i] = p.scale * dot(Sp + i * V, dop + t * V, V);
        }

        // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step
        at::Tensor dS = dht.defined() ? widen(dht[s.index][h]) : at::zeros({K, V}, at::kFloat);
        float* dSp = dS.data_ptr<float>();
        for (int64_t seg = segments; seg-- > 0;) {
            const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
            std::copy(ckp + seg * K * V, ckp + (seg + 1) * K * V, bp);
            for (int64_t t = t0; t + 1 < t1; ++t) {
                float* next = bp + (t - t0 + 1) * K * V;
                std::copy(bp + (t - t0) * K * V, next, next);
                step(next, k + t * K, v + t * V, pk + t * K, a[t], beta[t], K, V, r.data(),
                     u.data());
            }
            for (int64_t t = t1; t-- > t0;) {
                const float* prev = bp + (t - t0) * K * V;  // S_{t-1}
                const float *kt = k + t * K, *pt = pk + t * K, *do_t = dop + t * V;
                // dS_t = dS + scale·q_t do_tᵀ; r = v_t − S_{t-1}ᵀ p_t; du = dS_tᵀ k_t
                std::copy(v + t * V, v + (t + 1) * V, r.begin());
                std::fill(du.begin(), du.end(), 0.0f);
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float* prev_i = prev + i * V;
                    const float sq = p.scale * q[t * K + i], ki = kt[i], pi = pt[i];
                    for (int64_t j = 0; j < V; ++j) {
                        dSi[j] += sq * do_t[j];
                        r[j] -= pi * prev_i[j];
                        du[j] += ki * dSi[j];
                    }
                }
                // u = β r: dv = β du, dβ = du·r, dpr = ∂L/∂(S_{t-1}ᵀ p_t) = −β du
                float dbeta_t = 0.0f;
                for (int64_t j = 0; j < V; ++j) {
                    u[j] = beta[t] * r[j];
                    dvp[t * V + j] = beta[t] * du[j];
                    dbeta_t += du[j] * r[j];
                    dpr[j] = -beta[t] * du[j];
                }
                dbp[t] = dbeta_t;
                // dk̂ = dS_t u; dp̂ = S_{t-1} dpr; dg = a⟨S_{t-1}, dS_t⟩; dS ← a dS_t + p dprᵀ
                float state_dot = 0.0f;
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float* prev_i = prev + i * V;
                    dkp[t * K + i] = dot(dSi, u.data(), V);
                    dpp[t * K + i] = dot(prev_i, dpr.data(), V);
                    state_dot += dot(prev_i, dSi, V);
                    const float pi = pt[i];
                    for (int64_t j = 0; j < V; ++j) dSi[j] = a[t] * dSi[j] + pi * dpr[j];
                }
                dgp[t] = a[t] * state_dot;
            }
        }
        const auto rows = [&](const at::Tensor& x) {
            return x[s.batch].slice(0, s.begin, s.end).select(1, h);
        };
        rows(views.dq).copy_(normalise_backward(lane.q, dq));
        rows(views.dk).copy_(normalise_backward(lane.k, dk));
        rows(outs.dp_hl).copy_(normalise_backward(lane.p, dpk));
        rows(views.dv).copy_(dv);
        rows(views.dbeta).copy_(dbeta);
        rows(views.dg).copy_(dg);
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dS);
    });
    return finish(result, grads);
}

}  // namespace lav::kernels
