// kernels/rebased/rebased_rows.cpp — rebased's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/rebased/rebased.h"

namespace lav::kernels {

RebasedArgs rebased_args(const Call& call) {
    RebasedArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.use_scale = call.flag("use_scale");
    a.use_normalize = call.flag("use_normalize");
    set_common_args(a, call);
    return a;
}

TensorMap results(const RebasedGrads& g) { return {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}}; }

void add_rebased_cpu_rows(RowTable& table) {
    add_named_variant_rows(table, {"rebased", "cpu", "cpu"}, {"parallel", "chunk", "recurrent"},
                           rebased_args, rebased_contract, rebased_fwd_cpu, rebased_bwd_cpu);
}

}  // namespace lav::kernels
