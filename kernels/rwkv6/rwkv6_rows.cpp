// kernels/rwkv6/rwkv6_rows.cpp — rwkv6's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/rwkv6/rwkv6.h"

namespace lav::kernels {

Rwkv6Args rwkv6_args(const Call& call) {
    Rwkv6Args a;
    LAV_TENSORS_FROM(a, call, q, k, v, w, u, h0);
    set_common_args(a, call);
    return a;
}

TensorMap results(const Rwkv6Fwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const Rwkv6Grads& g) { return LAV_NAMED(g, dq, dk, dv, dw, du, dh0); }

void add_rwkv6_cpu_rows(RowTable& table) {
    add_rows<Rwkv6Args, Rwkv6Fwd, Rwkv6Grads>(
        table, {"rwkv6", "cpu", "cpu"}, rwkv6_args, rwkv6_contract,
        {{"chunk", rwkv6_chunk_fwd_cpu, rwkv6_chunk_bwd_cpu},
         {"recurrent", rwkv6_recurrent_fwd_cpu, rwkv6_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
