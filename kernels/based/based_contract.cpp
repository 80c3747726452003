// kernels/based/based_contract.cpp — the precision contracts of Based's three variants; the
// items come from the shared table in common/cpu/feature_map_cpu.h, README.md says why.
#include "based/based.h"
#include "common/cpu/feature_map_cpu.h"

namespace lav::kernels {

feature_map::Args based_engine_args(const BasedArgs& a);

PrecisionContract based_contract(std::string_view variant, bool backward, const BasedArgs& args) {
    return feature_map::contract(based_engine_args(args), variant, backward);
}

}  // namespace lav::kernels
