// kernels/kda/kda_rows.cpp — kda's CPU rows, and the argument and result mapping of its rows.
#include <optional>
#include <string>

#include "kernels/common/rows.h"
#include "kernels/kda/kda.h"

namespace lav::kernels {

KdaArgs kda_args(const Call& call) {
    KdaArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, beta, A_log, dt_bias, h0);
    LAV_FLAGS_FROM(a, call, use_qk_l2norm_in_kernel, use_gate_in_kernel);
    const std::string& lower_bound = call.option("lower_bound");
    a.lower_bound = lower_bound == "none" ? std::nullopt : std::optional(std::stod(lower_bound));
    LAV_FLAGS_FROM(a, call, use_beta_sigmoid_in_kernel, allow_neg_eigval);
    set_common_args(a, call);
    return a;
}

TensorMap results(const KdaFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const KdaGrads& g) {
    return LAV_NAMED(g, dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0);
}

void add_kda_cpu_rows(RowTable& table) {
    add_rows<KdaArgs, KdaFwd, KdaGrads>(
        table, {"kda", "cpu", "cpu"}, kda_args, kda_contract,
        {{"chunk", kda_chunk_fwd_cpu, kda_chunk_bwd_cpu},
         {"recurrent", kda_recurrent_fwd_cpu, kda_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
