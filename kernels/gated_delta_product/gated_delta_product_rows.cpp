// kernels/gated_delta_product/gated_delta_product_rows.cpp — gated_delta_product's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/gated_delta_product/gated_delta_product.h"

namespace lav::kernels {

GatedDeltaProductArgs gated_delta_product_args(const Call& call) {
    GatedDeltaProductArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.g = call.get("g");
    a.beta = call.need("beta");
    a.h0 = call.get("h0");
    a.num_householder = call.int_option("num_householder");
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    set_common_args(a, call);
    return a;
}

TensorMap results(const GatedDeltaProductFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const GatedDeltaProductGrads& g) {
    return {{"dq", g.dq},       {"dk", g.dk}, {"dv", g.dv},
            {"dbeta", g.dbeta}, {"dg", g.dg}, {"dh0", g.dh0}};
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
