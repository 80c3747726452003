// kernels/comba/comba_rows.cpp — comba's CPU rows, and the argument and result mapping of its
// rows.
#include "kernels/comba/comba.h"
#include "kernels/common/rows.h"

namespace lav::kernels {

CombaArgs comba_args(const Call& call) {
    CombaArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, p, g, beta, h0);
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    set_common_args(a, call);
    return a;
}

TensorMap results(const CombaFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const CombaGrads& g) { return LAV_NAMED(g, dq, dk, dv, dp, dg, dbeta, dh0); }

void add_comba_cpu_rows(RowTable& table) {
    add_rows<CombaArgs, CombaFwd, CombaGrads>(
        table, {"comba", "cpu", "cpu"}, comba_args, comba_contract,
        {{"chunk", comba_chunk_fwd_cpu, comba_chunk_bwd_cpu},
         {"recurrent", comba_recurrent_fwd_cpu, comba_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
