// kernels/kda/kda_rows.cpp — kda's CPU rows, and the argument and result mapping of its rows.
#include <optional>
#include <string>

#include "kernels/common/rows.h"
#include "kernels/kda/kda.h"

namespace lav::kernels {

KdaArgs kda_args(const Call& call) {
    KdaArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.g = call.need("g");
    a.beta = call.need("beta");
    a.A_log = call.get("A_log");
    a.dt_bias = call.get("dt_bias");
    a.h0 = call.get("h0");
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    a.use_gate_in_kernel = call.flag("use_gate_in_kernel");
    const std::string& lower_bound = call.option("lower_bound");
    a.lower_bound = lower_bound == "none" ? std::nullopt : std::optional(std::stod(lower_bound));
    a.use_beta_sigmoid_in_kernel = call.flag("use_beta_sigmoid_in_kernel");
    a.allow_neg_eigval = call.flag("allow_neg_eigval");
    set_common_args(a, call);
    return a;
}

TensorMap results(const KdaFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const KdaGrads& g) {
    return {{"dq", g.dq},
            {"dk", g.dk},
            {"dv", g.dv},
            {"dg", g.dg},
            {"dbeta", g.dbeta},
            {"dA_log", g.dA_log},
            {"ddt_bias", g.ddt_bias},
            {"dh0", g.dh0}};
}

void add_kda_cpu_rows(RowTable& table) {
    add_rows<KdaArgs, KdaFwd, KdaGrads>(
        table, {"kda", "cpu", "cpu"}, kda_args, kda_contract,
        {{"chunk", kda_chunk_fwd_cpu, kda_chunk_bwd_cpu},
         {"recurrent", kda_recurrent_fwd_cpu, kda_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
