// kernels/gated_delta_product/gated_delta_product_cpu.cpp — gated DeltaProduct on the CPU through
// LibTorch: the gated delta rule engine of common/cpu/delta_chunk.h (chunk and recurrent, forward
// and backward) run over the interleaved sub-steps, as fla/ops/gated_delta_product/chunk.py
// does. Not a reference.
#include <ATen/ATen.h>

#include <vector>

#include "common/cpu/delta_chunk.h"
#include "core/error.h"
#include "gated_delta_product/gated_delta_product.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "gated_delta_product";

/// A per-token head_last view [B, T, ...] spread over the sub-steps: [B, T·n, ...] zeros in
/// `layout` with row t·n + j = x's row t; returned in the layout.
at::Tensor interleave(const at::Tensor& x_hl, int64_t n, int64_t j, Layout layout) {
    std::vector<int64_t> sizes = x_hl.sizes().vec();
    sizes[1] *= n;
    if (layout == Layout::head_first) std::swap(sizes[1], sizes[2]);
    at::Tensor out = at::zeros(sizes, x_hl.options());
    to_head_last(out, layout).unflatten(1, {x_hl.size(1), n}).select(2, j).copy_(x_hl);
    return out;
}

/// The rows of sub-step j of every token of a [B, T·n, ...] tensor in `layout`, copied into a
/// fresh tensor of the same layout and dtype.
at::Tensor pick(const at::Tensor& x, int64_t n, int64_t j, Layout layout) {
    const at::Tensor hl = to_head_last(x, layout);
    const at::Tensor rows = hl.unflatten(1, {hl.size(1) / n, n}).select(2, j);
    at::Tensor out = at::empty_like(from_head_last(rows, layout), at::MemoryFormat::Contiguous);
    to_head_last(out, layout).copy_(rows);
    return out;
}

/// The engine's arguments over the interleaved sequence; checks what the engine cannot.
delta::Args engine_args(const GatedDeltaProductArgs& a) {
    const int64_t n = a.num_householder;
    // Preconditions
    LAV_CHECK(n >= 1, kFamily, " cpu: num_householder must be >= 1, got ", n);
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.beta.defined(), kFamily,
              " cpu needs q, k, v and beta");
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4, kFamily, " cpu: q and k must be 4-d, got ",
              a.q.sizes(), " and ", a.k.sizes());
    const at::Tensor q_hl = to_head_last(a.q, a.layout);  // [B, T, H, K]
    const at::Tensor k_hl = to_head_last(a.k, a.layout);  // [B, T·n, H, K]
    const int64_t B = q_hl.size(0), T = q_hl.size(1), H = q_hl.size(2);
    LAV_CHECK(k_hl.size(1) == T * n, kFamily, " cpu: k must have T·num_householder = ", T * n,
              " rows per batch, got ", a.k.sizes());
    delta::Args e;
    e.family = kFamily;
    e.q = interleave(q_hl, n, n - 1, a.layout);
    e.k = a.k;
    e.v = a.v;
    e.beta = a.beta;
    if (a.g.defined()) {
        const at::Tensor g_hl = to_head_last(a.g, a.layout);  // [B, T, H]
        LAV_CHECK(g_hl.sizes() == at::IntArrayRef({B, T, H}), kFamily,
                  " cpu: g must be [B, T, H] in q's layout, got ", a.g.sizes());
        e.g = interleave(g_hl, n, 0, a.layout);
    }
    e.h0 = a.h0;
    if (a.cu_seqlens.defined()) {
        LAV_CHECK(a.cu_seqlens.scalar_type() == at::kLong, kFamily,
                  " cpu: cu_seqlens must be int64");
        e.cu_seqlens = a.cu_seqlens * n;
    }
    e.layout = a.layout;
    e.scale = a.scale;
    e.l2norm = a.use_qk_l2norm_in_kernel;
    e.state_dtype = a.state_dtype;
    e.output_dtype = a.output_dtype;
    e.chunk_size = a.chunk_size;
    e.keep_chunk_states = a.keep_chunk_states;
    return e;
}

GatedDeltaProductFwd forward_of(const GatedDeltaProductArgs& a, const delta::Fwd& f) {
    return {pick(f.o, a.num_householder, a.num_householder - 1, a.layout), f.ht, f.h};
}

/// d_o per token spread onto each token's last sub-step.
at::Tensor interleaved_do(const GatedDeltaProductArgs& a, const at::Tensor& d_o) {
    LAV_CHECK(d_o.defined() && d_o.dim() == 4, kFamily, " cpu backward needs a 4-d d_o");
    const int64_t n = a.num_householder;
    return interleave(to_head_last(d_o, a.layout), n, n - 1, a.layout);
}

GatedDeltaProductGrads grads_of(const GatedDeltaProductArgs& a, const delta::Grads& g) {
    const int64_t n = a.num_householder;
    GatedDeltaProductGrads out;
    out.dq = pick(g.dq, n, n - 1, a.layout);
    out.dk = g.dk;
    out.dv = g.dv;
    if (g.dg.defined()) out.dg = pick(g.dg, n, 0, a.layout);
    out.dbeta = g.dbeta;
    out.dh0 = g.dh0;
    return out;
}

}  // namespace

GatedDeltaProductFwd gated_delta_product_chunk_fwd_cpu(const GatedDeltaProductArgs& args) {
    return forward_of(args, delta::chunk_fwd(engine_args(args)));
}

GatedDeltaProductGrads gated_delta_product_chunk_bwd_cpu(const GatedDeltaProductArgs& args,
                                                         const at::Tensor& d_o,
                                                         const at::Tensor& dht) {
    return grads_of(args, delta::chunk_bwd(engine_args(args), interleaved_do(args, d_o), dht));
}

GatedDeltaProductFwd gated_delta_product_recurrent_fwd_cpu(const GatedDeltaProductArgs& args) {
    return forward_of(args, delta::recurrent_fwd(engine_args(args)));
}

GatedDeltaProductGrads gated_delta_product_recurrent_bwd_cpu(const GatedDeltaProductArgs& args,
                                                             const at::Tensor& d_o,
                                                             const at::Tensor& dht) {
    return grads_of(args, delta::recurrent_bwd(engine_args(args), interleaved_do(args, d_o), dht));
}

}  // namespace lav::kernels
