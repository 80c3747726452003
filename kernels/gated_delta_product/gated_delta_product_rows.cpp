// kernels/gated_delta_product/gated_delta_product_rows.cpp — gated_delta_product's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/gated_delta_product/gated_delta_product.h"

namespace lav::kernels {

GatedDeltaProductArgs gated_delta_product_args(const Call& call) {
    GatedDeltaProductArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, beta, h0);
    a.num_householder = call.int_option("num_householder");
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    set_common_args(a, call);
    return a;
}

TensorMap results(const GatedDeltaProductFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const GatedDeltaProductGrads& g) {
    return LAV_NAMED(g, dq, dk, dv, dbeta, dg, dh0);
}

void add_gated_delta_product_cpu_rows(RowTable& table) {
    add_rows<GatedDeltaProductArgs, GatedDeltaProductFwd, GatedDeltaProductGrads>(
        table, {"gated_delta_product", "cpu", "cpu"}, gated_delta_product_args,
        gated_delta_product_contract,
        {{"chunk", gated_delta_product_chunk_fwd_cpu, gated_delta_product_chunk_bwd_cpu},
         {"recurrent", gated_delta_product_recurrent_fwd_cpu,
          gated_delta_product_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
