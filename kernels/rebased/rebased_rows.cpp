// kernels/rebased/rebased_rows.cpp — rebased's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/rebased/rebased.h"

namespace lav::kernels {

RebasedArgs rebased_args(const Call& call) {
    RebasedArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v);
    LAV_FLAGS_FROM(a, call, use_scale, use_normalize);
    set_common_args(a, call);
    return a;
}

TensorMap results(const RebasedGrads& g) { return LAV_NAMED(g, dq, dk, dv); }

void add_rebased_cpu_rows(RowTable& table) {
    add_named_variant_rows(table, {"rebased", "cpu", "cpu"}, {"parallel", "chunk", "recurrent"},
                           rebased_args, rebased_contract, rebased_fwd_cpu, rebased_bwd_cpu);
}

}  // namespace lav::kernels
