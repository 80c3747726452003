// src/harness/registry.cpp — the family registry, and the one call that adds every row.
#include "harness/registry.h"

#include <algorithm>

#include "core/error.h"

// One `add_<f>_<backend>_rows(RowTable&)` per row group of this build, defined under kernels/.
namespace lav::kernels {
#define LAV_ROWS(group) void add_##group##_rows(RowTable& table);
#include "harness/rows.inc"
#undef LAV_ROWS
}  // namespace lav::kernels

namespace lav::harness {

void Registry::add(Family family) {
    for (const auto& f : families_)
        LAV_ASSERT(f.name != family.name, "family registered twice: ", f.name);
    families_.push_back(std::move(family));
}

const Family& Registry::get(const std::string& name) const {
    std::string known;
    for (const auto& f : families_) {
        if (f.name == name) return f;
        known += (known.empty() ? "" : ", ") + f.name;
    }
    throw UsageError("unknown kernel family '" + name + "' (this build has: " + known + ")");
}

std::vector<std::string> Registry::backends() const {
    std::vector<std::string> out;
    for (const Row& r : rows_.rows())
        if (std::find(out.begin(), out.end(), r.backend) == out.end()) out.push_back(r.backend);
    return out;
}

scenario::Catalog Registry::catalog() const {
    scenario::Catalog out;
    for (const auto& f : families_) out.push_back(info_of(f));
    return out;
}

void register_all(Registry& registry) {
#define LAV_FAMILY(name) registry.add(name##_family());
#include "harness/families.inc"
#undef LAV_FAMILY
#define LAV_ROWS(group) kernels::add_##group##_rows(registry.rows());
#include "harness/rows.inc"
#undef LAV_ROWS
}

}  // namespace lav::harness
