// src/core/row.cpp — Call's accessors and the row table.
#include "core/row.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace lav {
namespace {
double jit_total = 0;  // rows run one at a time, on one thread
}  // namespace

double jit_seconds() { return jit_total; }
void add_jit_seconds(double seconds) { jit_total += seconds; }

at::Tensor Call::get(const std::string& name) const {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
}

const at::Tensor& Call::need(const std::string& name) const {
    const auto it = tensors.find(name);
    LAV_ASSERT(it != tensors.end() && it->second.defined(), "row called without tensor ", name);
    return it->second;
}

c10::ScalarType Call::state_dtype_of(const std::string& component) const {
    const auto it = state_dtypes.find(component);
    return it != state_dtypes.end() ? it->second : state_dtype;
}

const std::string& Call::option(const std::string& name) const {
    const auto it = options.find(name);
    LAV_ASSERT(it != options.end(), "row called without option ", name);
    return it->second;
}

bool Call::flag(const std::string& name) const { return option(name) == "true"; }

int64_t Call::int_option(const std::string& name) const { return std::stoll(option(name)); }

int64_t Call::dim(const std::string& letter) const {
    const auto it = dims.find(letter);
    LAV_ASSERT(it != dims.end(), "row called without dimension ", letter);
    return it->second;
}

at::Tensor Call::cu_seqlens_tensor() const {
    if (cu_seqlens.empty()) return {};
    return at::tensor(at::ArrayRef<int64_t>(cu_seqlens), at::kLong);
}

void RowTable::add(Row row) {
    LAV_ASSERT(!find(row.family, row.variant, row.backend), "row added twice: ", row.family, " ",
               row.variant, " ", row.backend);
    LAV_ASSERT(row.forward && row.backward && row.contract, "row ", row.family, " ", row.variant,
               " ", row.backend, " lacks forward, backward or contract");
    rows_.push_back(std::move(row));
}

const Row* RowTable::find(const std::string& family, const std::string& variant,
                          const std::string& backend) const {
    for (const Row& r : rows_)
        if (r.family == family && r.variant == variant && r.backend == backend) return &r;
    return nullptr;
}

void RowTable::add_absence(const std::string& family, const std::string& variant,
                           const std::string& backend, std::string reason) {
    absences_[{family, variant, backend}] = std::move(reason);
}

std::string RowTable::absence(const std::string& family, const std::string& variant,
                              const std::string& backend) const {
    auto it = absences_.find({family, variant, backend});
    if (it != absences_.end())
        return backend + " has no " + family + " " + variant + ": " + it->second;
    return "lav has no " + backend + " row for " + family + " " + variant;
}

}  // namespace lav
