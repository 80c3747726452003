// kernels/based/based_rows.cpp — based's CPU rows.
#include "kernels/based/based.h"
#include "kernels/common/rows.h"

namespace lav::kernels {

BasedArgs based_args(const Call& call) {
    BasedArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v);
    a.use_norm = call.flag("use_norm");
    set_common_args(a, call);
    return a;
}

TensorMap results(const BasedGrads& g) { return LAV_NAMED(g, dq, dk, dv); }

void add_based_cpu_rows(RowTable& table) {
    add_named_variant_rows(table, {"based", "cpu", "cpu"}, {"parallel", "chunk", "recurrent"},
                           based_args, based_contract, based_fwd_cpu, based_bwd_cpu);
}

}  // namespace lav::kernels
