// tests/providers/test_ops.cpp — a small PyTorch op library for the provider tests: simple_gla's
// recurrence in plain ATen (autograd comes from the ops it is made of), registered as
// lavtest::recurrent_simple_gla and lavtest::chunk_simple_gla, lavbad's two faulty ones,
// lavcrash's two that crash on a varlen batch and lavleak's, whose sequences leak.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

namespace {

using OptTensor = std::optional<at::Tensor>;

// S_t = exp(g_t) S_{t-1} + k_t v_tᵀ, o_t = scale Sᵀ q_t, per sequence, in the state dtype; with
// `carry`, a sequence also starts from the state the one before it left.
std::tuple<at::Tensor, at::Tensor> run_sequences(const at::Tensor& q_in, const at::Tensor& k_in,
                                                 const at::Tensor& v_in, const OptTensor& g_in,
                                                 const OptTensor& g_gamma, const OptTensor& h0,
                                                 double scale, bool head_first,
                                                 const OptTensor& cu_seqlens,
                                                 c10::ScalarType state_dtype, bool carry) {
    const auto head_last = [&](const at::Tensor& x) { return head_first ? x.transpose(1, 2) : x; };
    const at::Tensor q = head_last(q_in).to(state_dtype), k = head_last(k_in).to(state_dtype);
    const at::Tensor v = head_last(v_in).to(state_dtype);
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
    at::Tensor g = g_in ? head_last(*g_in).to(state_dtype) : at::zeros({B, T, H}, q.options());
    if (g_gamma) g = g + g_gamma->to(state_dtype);
    std::vector<int64_t> starts, ends, batch;
    if (cu_seqlens) {
        const at::Tensor cu = cu_seqlens->cpu().to(at::kLong);
        for (int64_t n = 0; n + 1 < cu.numel(); ++n) {
            batch.push_back(0), starts.push_back(cu[n].item<int64_t>());
            ends.push_back(cu[n + 1].item<int64_t>());
        }
    } else {
        for (int64_t b = 0; b < B; ++b) batch.push_back(b), starts.push_back(0), ends.push_back(T);
    }
    std::vector<at::Tensor> rows(B * T), finals;
    for (size_t n = 0; n < batch.size(); ++n) {
        at::Tensor S = h0 ? h0->select(0, n).to(state_dtype) : at::zeros({H, K, V}, q.options());
        if (carry && n > 0) S = S + finals.back();
        for (int64_t t = starts[n]; t < ends[n]; ++t) {
            const int64_t b = batch[n];
            S = S * g[b][t].exp().view({H, 1, 1}) + k[b][t].unsqueeze(2) * v[b][t].unsqueeze(1);
            rows[b * T + t] = (S * q[b][t].unsqueeze(2)).sum(1) * scale;
        }
        finals.push_back(S);
    }
    at::Tensor o = at::stack(rows).view({B, T, H, V}).to(q_in.scalar_type());
    if (head_first) o = o.transpose(1, 2);
    return {o, at::stack(finals)};
}

std::tuple<at::Tensor, at::Tensor> recurrence(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const OptTensor& g,
                                              const OptTensor& g_gamma, const OptTensor& h0,
                                              double scale, bool head_first,
                                              const OptTensor& cu_seqlens,
                                              c10::ScalarType state_dtype) {
    return run_sequences(q, k, v, g, g_gamma, h0, scale, head_first, cu_seqlens, state_dtype,
                         false);
}

// lavbad: o always in fp32, whatever the inputs (a contract finding for 16-bit inputs)
std::tuple<at::Tensor, at::Tensor> fp32_output(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const OptTensor& g,
                                               const OptTensor& g_gamma, const OptTensor& h0,
                                               double scale, bool head_first,
                                               const OptTensor& cu_seqlens,
                                               c10::ScalarType state_dtype) {
    auto [o, ht] = recurrence(q, k, v, g, g_gamma, h0, scale, head_first, cu_seqlens, state_dtype);
    return {o.to(at::kFloat), ht};
}

// lavbad: a kernel that refuses every input
std::tuple<at::Tensor, at::Tensor> refuses(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const OptTensor&, const OptTensor&, const OptTensor&,
                                           double, bool, const OptTensor&, c10::ScalarType) {
    throw std::runtime_error("lavbad chunk_simple_gla: no kernel for these inputs");
}

// lavcrash: kernels that take the process down on a varlen batch, as a buggy extension can,
// and compute the recurrence otherwise (--isolate's test)
template <int Signal>
std::tuple<at::Tensor, at::Tensor> crashes_on_varlen(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v, const OptTensor& g,
                                                     const OptTensor& g_gamma, const OptTensor& h0,
                                                     double scale, bool head_first,
                                                     const OptTensor& cu_seqlens,
                                                     c10::ScalarType state_dtype) {
    if (cu_seqlens) {
        std::raise(Signal);
        std::abort();
    }
    return recurrence(q, k, v, g, g_gamma, h0, scale, head_first, cu_seqlens, state_dtype);
}

// lavleak: a varlen batch's sequences each start from the state the one before left
std::tuple<at::Tensor, at::Tensor> leaks(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const OptTensor& g,
                                         const OptTensor& g_gamma, const OptTensor& h0,
                                         double scale, bool head_first, const OptTensor& cu_seqlens,
                                         c10::ScalarType state_dtype) {
    return run_sequences(q, k, v, g, g_gamma, h0, scale, head_first, cu_seqlens, state_dtype, true);
}

constexpr const char* kSchema =
    "(Tensor q, Tensor k, Tensor v, Tensor? g=None, Tensor? g_gamma=None, "
    "Tensor? initial_state=None, *, float scale, bool head_first=False, "
    "Tensor? cu_seqlens=None, ScalarType state_dtype=float32) -> (Tensor, Tensor)";

}  // namespace

// def with a function registers it for every device (CompositeImplicitAutograd)
TORCH_LIBRARY(lavtest, m) {
    m.def(("recurrent_simple_gla" + std::string(kSchema)).c_str(), &recurrence);
    m.def(("chunk_simple_gla" + std::string(kSchema)).c_str(), &recurrence);
}

TORCH_LIBRARY(lavcrash, m) {
    m.def(("recurrent_simple_gla" + std::string(kSchema)).c_str(), &crashes_on_varlen<SIGABRT>);
    m.def(("chunk_simple_gla" + std::string(kSchema)).c_str(), &crashes_on_varlen<SIGSEGV>);
}

TORCH_LIBRARY(lavleak, m) {
    m.def(("recurrent_simple_gla" + std::string(kSchema)).c_str(), &leaks);
}

TORCH_LIBRARY(lavbad, m) {
    m.def(("recurrent_simple_gla" + std::string(kSchema)).c_str(), &fp32_output);
    m.def(("chunk_simple_gla" + std::string(kSchema)).c_str(), &refuses);
}
