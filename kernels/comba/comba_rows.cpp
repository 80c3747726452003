// kernels/comba/comba_rows.cpp — comba's CPU rows, and the argument and result mapping of its
// rows.
#include "kernels/comba/comba.h"
#include "kernels/common/rows.h"

namespace lav::kernels {

CombaArgs comba_args(const Call& call) {
    CombaArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.p = call.need("p");
    a.g = call.need("g");
    a.beta = call.need("beta");
    a.h0 = call.get("h0");
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    set_common_args(a, call);
    return a;
}

TensorMap results(const CombaFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const CombaGrads& g) {
    return {{"dq", g.dq}, {"dk", g.dk},       {"dv", g.dv},  {"dp", g.dp},
            {"dg", g.dg}, {"dbeta", g.dbeta}, {"dh0", g.dh0}};
}

void add_comba_cpu_rows(RowTable& table) {
    add_rows<CombaArgs, CombaFwd, CombaGrads>(
        table, {"comba", "cpu", "cpu"}, comba_args, comba_contract,
        {{"chunk", comba_chunk_fwd_cpu, comba_chunk_bwd_cpu},
         {"recurrent", comba_recurrent_fwd_cpu, comba_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
