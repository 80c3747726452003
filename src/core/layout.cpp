// src/core/layout.cpp — layout spellings and the head_first/head_last views.
#include "core/layout.h"

#include "core/error.h"

namespace lav {

std::string_view layout_name(Layout layout) {
    return layout == Layout::head_first ? "head_first" : "head_last";
}

std::optional<Layout> parse_layout(std::string_view name) {
    if (name == "head_first") return Layout::head_first;
    if (name == "head_last") return Layout::head_last;
    return std::nullopt;
}

at::Tensor to_head_last(const at::Tensor& x, Layout from) {
    LAV_ASSERT(x.dim() >= 3, "time-major tensor needs at least 3 dims, got ", x.dim());
    return from == Layout::head_last ? x : x.transpose(1, 2);
}

at::Tensor from_head_last(const at::Tensor& x, Layout to) {
    LAV_ASSERT(x.dim() >= 3, "time-major tensor needs at least 3 dims, got ", x.dim());
    return to == Layout::head_last ? x : x.transpose(1, 2);
}

}  // namespace lav
