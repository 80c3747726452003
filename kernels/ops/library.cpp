// kernels/ops/library.cpp — lav's CUDA kernels as PyTorch ops with autograd:
// torch.ops.load_library("liblav_ops.so"), then torch.ops.lav.fused_recurrent_gla(...),
// torch.ops.lav.chunk_gla(...) etc.
//
// Arguments follow flash-linear-attention's Python functions of the same names (log-space
// gates, head_first, cu_seqlens, initial_state, scale), plus state_dtype, the dtype in which
// states are stored (float32 by default). Every op returns (o, final_state).
#include <torch/autograd.h>
#include <torch/library.h>

#include "gla/gla.h"
#include "hgrn/hgrn.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

at::Tensor value_or_undefined(const OptTensor& t) { return t.has_value() ? *t : at::Tensor(); }

Layout layout_of(bool head_first) { return head_first ? Layout::head_first : Layout::head_last; }

/// The cotangent of o: zeros when o took no part in the loss.
at::Tensor cotangent(const at::Tensor& grad, const at::Tensor& like) {
    return grad.defined() ? grad.contiguous() : at::zeros_like(like);
}

/// The cotangent of the final state: undefined (read as zeros) when it took no part.
at::Tensor state_cotangent(const at::Tensor& grad) {
    return grad.defined() ? grad.contiguous() : at::Tensor();
}

// Function::apply links autograd only through its tensor arguments, so each op passes its
// tensors one by one (optional ones as std::optional) and the rest as plain values. One
// Function serves both variants of a family: chunk_size 0 is the recurrent one.

struct SimpleGlaFunction : torch::autograd::Function<SimpleGlaFunction> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const OptTensor& g, const OptTensor& g_gamma,
                                 const OptTensor& h0, const OptTensor& cu_seqlens, double scale,
                                 bool head_first, int64_t state_dtype, int64_t chunk_size) {
        const SimpleGlaArgs a =
            args(q, k, v, g, g_gamma, h0, cu_seqlens, scale, head_first, state_dtype, chunk_size);
        ctx->save_for_backward({q, k, v, a.g, a.g_gamma, a.h0, a.cu_seqlens});
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["head_first"] = head_first;
        ctx->saved_data["state_dtype"] = state_dtype;
        ctx->saved_data["chunk_size"] = chunk_size;
        const SimpleGlaFwd out =
            chunk_size > 0 ? simple_gla_chunk_fwd_cuda(a) : simple_gla_recurrent_fwd_cuda(a);
        return {out.o, out.ht};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const SimpleGlaArgs a =
            args(s[0], s[1], s[2], s[3], s[4], s[5], s[6], ctx->saved_data["scale"].toDouble(),
                 ctx->saved_data["head_first"].toBool(), ctx->saved_data["state_dtype"].toInt(),
                 ctx->saved_data["chunk_size"].toInt());
        const at::Tensor d_o = cotangent(grads[0], a.v), dht = state_cotangent(grads[1]);
        const SimpleGlaGrads d = a.chunk_size > 0 ? simple_gla_chunk_bwd_cuda(a, d_o, dht)
                                                  : simple_gla_recurrent_bwd_cuda(a, d_o, dht);
        return {d.dq, d.dk, d.dv, d.dg, {}, d.dh0, {}, {}, {}, {}, {}};
    }
    static SimpleGlaArgs args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const OptTensor& g, const OptTensor& g_gamma, const OptTensor& h0,
                              const OptTensor& cu_seqlens, double scale, bool head_first,
                              int64_t state_dtype, int64_t chunk_size) {
        SimpleGlaArgs a;
        a.q = q, a.k = k, a.v = v, a.g = value_or_undefined(g);
        a.g_gamma = value_or_undefined(g_gamma), a.h0 = value_or_undefined(h0);
        a.cu_seqlens = value_or_undefined(cu_seqlens);
        a.scale = scale, a.layout = layout_of(head_first);
        a.state_dtype = c10::ScalarType(state_dtype);
        a.chunk_size = chunk_size;
        return a;
    }
};

std::tuple<at::Tensor, at::Tensor> fused_recurrent_simple_gla(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& g,
    const OptTensor& g_gamma, std::optional<double> scale, const OptTensor& initial_state,
    const OptTensor& cu_seqlens, bool head_first, std::optional<at::ScalarType> state_dtype) {
    const variable_list out = SimpleGlaFunction::apply(
        q, k, v, g, g_gamma, initial_state, cu_seqlens, scale.value_or(0.0), head_first,
        int64_t(state_dtype.value_or(at::kFloat)), int64_t(0));
    return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> chunk_simple_gla(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& g,
    const OptTensor& g_gamma, std::optional<double> scale, const OptTensor& initial_state,
    const OptTensor& cu_seqlens, bool head_first, std::optional<at::ScalarType> state_dtype,
    int64_t chunk_size) {
    TORCH_CHECK(chunk_size >= 1, "chunk_size must be positive, got ", chunk_size);
    const variable_list out = SimpleGlaFunction::apply(
        q, k, v, g, g_gamma, initial_state, cu_seqlens, scale.value_or(0.0), head_first,
        int64_t(state_dtype.value_or(at::kFloat)), chunk_size);
    return {out[0], out[1]};
}

struct GlaFunction : torch::autograd::Function<GlaFunction> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const at::Tensor& g, const OptTensor& h0,
                                 const OptTensor& cu_seqlens, double scale, bool head_first,
                                 int64_t state_dtype, int64_t chunk_size) {
        const GlaArgs a =
            args(q, k, v, g, h0, cu_seqlens, scale, head_first, state_dtype, chunk_size);
        ctx->save_for_backward({q, k, v, g, a.h0, a.cu_seqlens});
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["head_first"] = head_first;
        ctx->saved_data["state_dtype"] = state_dtype;
        ctx->saved_data["chunk_size"] = chunk_size;
        const GlaFwd out = chunk_size > 0 ? gla_chunk_fwd_cuda(a) : gla_recurrent_fwd_cuda(a);
        return {out.o, out.ht};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const GlaArgs a =
            args(s[0], s[1], s[2], s[3], s[4], s[5], ctx->saved_data["scale"].toDouble(),
                 ctx->saved_data["head_first"].toBool(), ctx->saved_data["state_dtype"].toInt(),
                 ctx->saved_data["chunk_size"].toInt());
        const at::Tensor d_o = cotangent(grads[0], a.v), dht = state_cotangent(grads[1]);
        const GlaGrads d = a.chunk_size > 0 ? gla_chunk_bwd_cuda(a, d_o, dht)
                                            : gla_recurrent_bwd_cuda(a, d_o, dht);
        return {d.dq, d.dk, d.dv, d.dg, d.dh0, {}, {}, {}, {}, {}};
    }
    static GlaArgs args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& g, const OptTensor& h0, const OptTensor& cu_seqlens,
                        double scale, bool head_first, int64_t state_dtype, int64_t chunk_size) {
        GlaArgs a;
        a.q = q, a.k = k, a.v = v, a.g = g, a.h0 = value_or_undefined(h0);
        a.cu_seqlens = value_or_undefined(cu_seqlens);
        a.scale = scale, a.layout = layout_of(head_first);
        a.state_dtype = c10::ScalarType(state_dtype);
        a.chunk_size = chunk_size;
        return a;
    }
};

std::tuple<at::Tensor, at::Tensor> fused_recurrent_gla(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, const at::Tensor& g,
                                                       std::optional<double> scale,
                                                       const OptTensor& initial_state,
                                                       const OptTensor& cu_seqlens, bool head_first,
                                                       std::optional<at::ScalarType> state_dtype) {
    const variable_list out =
        GlaFunction::apply(q, k, v, g, initial_state, cu_seqlens, scale.value_or(0.0), head_first,
                           int64_t(state_dtype.value_or(at::kFloat)), int64_t(0));
    return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> chunk_gla(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    std::optional<double> scale, const OptTensor& initial_state, const OptTensor& cu_seqlens,
    bool head_first, std::optional<at::ScalarType> state_dtype, int64_t chunk_size) {
    TORCH_CHECK(chunk_size >= 1, "chunk_size must be positive, got ", chunk_size);
    const variable_list out =
        GlaFunction::apply(q, k, v, g, initial_state, cu_seqlens, scale.value_or(0.0), head_first,
                           int64_t(state_dtype.value_or(at::kFloat)), chunk_size);
    return {out[0], out[1]};
}

/// hgrn over [B, T, 1, D]: FLA's [B, T, D] seen as one head of D channels.
struct HgrnFunction : torch::autograd::Function<HgrnFunction> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& g,
                                 const OptTensor& h0, const OptTensor& cu_seqlens,
                                 int64_t state_dtype, int64_t chunk_size) {
        const HgrnArgs a = args(x, g, h0, cu_seqlens, state_dtype, chunk_size);
        ctx->save_for_backward({x, g, value_or_undefined(h0), a.cu_seqlens});
        ctx->saved_data["state_dtype"] = state_dtype;
        ctx->saved_data["chunk_size"] = chunk_size;
        const HgrnFwd out = chunk_size > 0 ? hgrn_chunk_fwd_cuda(a) : hgrn_recurrent_fwd_cuda(a);
        return {out.o.squeeze(2), out.ht.squeeze(1)};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const HgrnArgs a = args(s[0], s[1], s[2], s[3], ctx->saved_data["state_dtype"].toInt(),
                                ctx->saved_data["chunk_size"].toInt());
        const at::Tensor d_o = cotangent(grads[0], s[0]).unsqueeze(2);
        at::Tensor dht = state_cotangent(grads[1]);
        if (dht.defined()) dht = dht.unsqueeze(1);
        const HgrnGrads d = a.chunk_size > 0 ? hgrn_chunk_bwd_cuda(a, d_o, dht)
                                             : hgrn_recurrent_bwd_cuda(a, d_o, dht);
        return {d.dx.squeeze(2),
                d.dg.squeeze(2),
                d.dh0.defined() ? d.dh0.squeeze(1) : d.dh0,
                {},
                {},
                {}};
    }
    static HgrnArgs args(const at::Tensor& x, const at::Tensor& g, const OptTensor& h0,
                         const OptTensor& cu_seqlens, int64_t state_dtype, int64_t chunk_size) {
        TORCH_CHECK(x.dim() == 3 && g.sizes() == x.sizes(),
                    "hgrn takes x and g of shape [B, T, D]");
        HgrnArgs a;
        a.x = x.unsqueeze(2), a.g = g.unsqueeze(2);
        const at::Tensor state = value_or_undefined(h0);
        if (state.defined()) a.h0 = state.unsqueeze(1);
        a.cu_seqlens = value_or_undefined(cu_seqlens);
        a.state_dtype = c10::ScalarType(state_dtype);
        a.chunk_size = chunk_size;
        return a;
    }
};

std::tuple<at::Tensor, at::Tensor> fused_recurrent_hgrn(const at::Tensor& x, const at::Tensor& g,
                                                        const OptTensor& initial_state,
                                                        const OptTensor& cu_seqlens,
                                                        std::optional<at::ScalarType> state_dtype) {
    const variable_list out = HgrnFunction::apply(
        x, g, initial_state, cu_seqlens, int64_t(state_dtype.value_or(at::kFloat)), int64_t(0));
    return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> chunk_hgrn(const at::Tensor& x, const at::Tensor& g,
                                              const OptTensor& initial_state,
                                              const OptTensor& cu_seqlens,
                                              std::optional<at::ScalarType> state_dtype,
                                              int64_t chunk_size) {
    TORCH_CHECK(chunk_size >= 1, "chunk_size must be positive, got ", chunk_size);
    const variable_list out = HgrnFunction::apply(
        x, g, initial_state, cu_seqlens, int64_t(state_dtype.value_or(at::kFloat)), chunk_size);
    return {out[0], out[1]};
}

}  // namespace
}  // namespace lav::kernels

TORCH_LIBRARY(lav, m) {
    m.def(
        "fused_recurrent_simple_gla(Tensor q, Tensor k, Tensor v, Tensor? g=None, "
        "Tensor? g_gamma=None, float? scale=None, Tensor? initial_state=None, "
        "Tensor? cu_seqlens=None, bool head_first=False, ScalarType? state_dtype=None) "
        "-> (Tensor, Tensor)");
    m.def(
        "fused_recurrent_gla(Tensor q, Tensor k, Tensor v, Tensor g, float? scale=None, "
        "Tensor? initial_state=None, Tensor? cu_seqlens=None, bool head_first=False, "
        "ScalarType? state_dtype=None) -> (Tensor, Tensor)");
    m.def(
        "fused_recurrent_hgrn(Tensor x, Tensor g, Tensor? initial_state=None, "
        "Tensor? cu_seqlens=None, ScalarType? state_dtype=None) -> (Tensor, Tensor)");
    m.def(
        "chunk_simple_gla(Tensor q, Tensor k, Tensor v, Tensor? g=None, Tensor? g_gamma=None, "
        "float? scale=None, Tensor? initial_state=None, Tensor? cu_seqlens=None, "
        "bool head_first=False, ScalarType? state_dtype=None, int chunk_size=64) "
        "-> (Tensor, Tensor)");
    m.def(
        "chunk_gla(Tensor q, Tensor k, Tensor v, Tensor g, float? scale=None, "
        "Tensor? initial_state=None, Tensor? cu_seqlens=None, bool head_first=False, "
        "ScalarType? state_dtype=None, int chunk_size=64) -> (Tensor, Tensor)");
    m.def(
        "chunk_hgrn(Tensor x, Tensor g, Tensor? initial_state=None, Tensor? cu_seqlens=None, "
        "ScalarType? state_dtype=None, int chunk_size=64) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(lav, Autograd, m) {
    m.impl("fused_recurrent_simple_gla", &lav::kernels::fused_recurrent_simple_gla);
    m.impl("fused_recurrent_gla", &lav::kernels::fused_recurrent_gla);
    m.impl("fused_recurrent_hgrn", &lav::kernels::fused_recurrent_hgrn);
    m.impl("chunk_simple_gla", &lav::kernels::chunk_simple_gla);
    m.impl("chunk_gla", &lav::kernels::chunk_gla);
    m.impl("chunk_hgrn", &lav::kernels::chunk_hgrn);
}
