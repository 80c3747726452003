// kernels/delta_rule/delta_rule_op.cpp — delta_rule's CUDA backend: the recurrent delta rule
// kernels without a gate, and its CUDA row (recurrent only: chunk runs on the CPU row).
#include "common/cuda/delta_recurrent_cuda.h"
#include "common/glue/cuda_glue.h"
#include "common/glue/delta_recurrent_op.h"
#include "common/rows.h"
#include "delta_rule/delta_rule.h"

namespace lav::kernels {
namespace {

DeltaTensors tensors(const DeltaRuleArgs& a) {
    DeltaTensors t;
    t.family = "delta_rule";
    t.q = a.q;
    t.k = a.k;
    t.v = a.v;
    t.beta = a.beta;
    t.h0 = a.h0;
    t.cu_seqlens = a.cu_seqlens;
    t.layout = a.layout;
    t.scale = a.scale;
    t.l2norm = a.use_qk_l2norm_in_kernel;
    t.state_dtype = a.state_dtype;
    t.output_dtype = a.output_dtype;
    return t;
}

}  // namespace

DeltaRuleFwd delta_rule_recurrent_fwd_cuda(const DeltaRuleArgs& args) {
    const DeltaOut out = delta_recurrent_fwd_cuda(tensors(args));
    return {out.o, out.ht, {}};
}

DeltaRuleGrads delta_rule_recurrent_bwd_cuda(const DeltaRuleArgs& args, const at::Tensor& d_o,
                                             const at::Tensor& dht) {
    const DeltaGradsOut g = delta_recurrent_bwd_cuda(tensors(args), d_o, dht);
    return {g.dq, g.dk, g.dv, g.dbeta, g.dh0};
}

void add_delta_rule_cuda_rows(RowTable& table) {
    set_poison_outputs(true);
    add_rows<DeltaRuleArgs, DeltaRuleFwd, DeltaRuleGrads>(
        table, {"delta_rule", "cuda", "cuda"}, delta_rule_args, delta_rule_contract,
        {{"recurrent", delta_rule_recurrent_fwd_cuda, delta_rule_recurrent_bwd_cuda}},
        [](const Call& c) { return c.dim("K") <= cuda::kMaxDeltaKeys; });
}

}  // namespace lav::kernels
