// src/core/layout.h — head_first [B, H, T, D] and head_last [B, T, H, D] layouts, as views.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>

namespace lav {

enum class Layout { head_first, head_last };

std::string_view layout_name(Layout layout);
std::optional<Layout> parse_layout(std::string_view name);

/// Views a time-major tensor ([B, T, H, ...] in head_last) in head_last order: for head_first
/// input [B, H, T, ...] this swaps dims 1 and 2 (no copy); head_last input is returned as is.
at::Tensor to_head_last(const at::Tensor& x, Layout from);

/// The inverse of to_head_last: views a head_last tensor in `to` order (no copy).
at::Tensor from_head_last(const at::Tensor& x, Layout to);

}  // namespace lav
