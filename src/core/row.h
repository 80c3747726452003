// src/core/row.h — a backend row: one family variant on one backend, over named tensors.
//
// A family's kernels reach the harness as rows. A row does not know scenario files or reports:
// it is called with the case's tensors by name and its settings (a Call), and returns its
// results by name, in the layout it was given. Rows are added to a RowTable by an explicit call
// per family and backend (kernels/<f>/<f>_rows.cpp for the CPU, the family's CUDA glue for
// CUDA), so a row may equally wrap an op from a library lav did not build.
//
//   void add_simple_gla_cpu_rows(RowTable& table) {
//       table.add({"simple_gla", "chunk", "cpu", "cpu", true, {}, forward, backward, contract});
//   }
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/layout.h"
#include "core/precision_contract.h"

namespace lav {

using TensorMap = std::map<std::string, at::Tensor>;

/// What a row is called with: one case's tensors and settings.
struct Call {
    /// inputs by their declared names in the case's dtypes and layout; for a backward pass
    /// also the cotangents (d_o, dht, ...). Optional inputs the case lacks are absent.
    TensorMap tensors;
    /// the family's options, every one set (defaults filled in)
    std::map<std::string, std::string> options;
    /// dimension letters: B, T, H, HV, K, V, N (sequences), and the family's own
    std::map<std::string, int64_t> dims;
    Layout layout = Layout::head_last;
    c10::ScalarType state_dtype = c10::ScalarType::Float;
    /// per state component (gsa: hk, hv) where the case sets them; see state_dtype_of
    std::map<std::string, c10::ScalarType> state_dtypes;
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;
    int64_t chunk_size = 64;
    double scale = 0.0;               ///< resolved: K^-0.5 where the case leaves it unset
    std::vector<int64_t> cu_seqlens;  ///< empty: a dense batch
    /// a chunk forward also returns its stored chunk states as "h" (for --dump-intermediates);
    /// a reference returns its states at the same boundaries as "states"
    bool keep_chunk_states = false;

    /// The tensor `name`, or an undefined tensor when the call has none (h0, g, ...).
    at::Tensor get(const std::string& name) const;
    /// The tensor `name`; throws InternalError when absent (the declaration requires it).
    const at::Tensor& need(const std::string& name) const;
    /// The dtype the state component `component` is stored in: its own, or state_dtype.
    c10::ScalarType state_dtype_of(const std::string& component) const;
    const std::string& option(const std::string& name) const;
    /// True when the boolean option `name` is "true".
    bool flag(const std::string& name) const;
    int64_t int_option(const std::string& name) const;
    int64_t dim(const std::string& letter) const;
    /// cu_seqlens as the int64 CPU tensor kernels take; undefined for a dense batch.
    at::Tensor cu_seqlens_tensor() const;
};

/// One (family, variant, backend): what it takes, how it runs, what it promises.
struct Row {
    std::string family;   ///< "simple_gla"
    std::string variant;  ///< "chunk", "recurrent"
    std::string backend;  ///< the name records carry: "cpu", "cuda", or a provider's
    std::string device;   ///< where its tensors must live: "cpu" or "cuda"
    /// whether --backend auto may choose it (lav's own rows); others run when named
    bool automatic = true;
    /// whether the harness runs it under the dtype tracer, keeping in the record's trace the
    /// ops its code dispatched that mix or change floating dtypes (rows lav did not write)
    bool traced = false;
    /// whether it takes the call's sizes and options (its tensors may be absent); unset: all
    std::function<bool(const Call&)> fits;
    /// the forward results (o, ht, ...) on the call's device, in its layout
    std::function<TensorMap(const Call&)> forward;
    /// the gradients (dq, dk, ...) of the inputs it differentiates
    std::function<TensorMap(const Call&)> backward;
    std::function<PrecisionContract(const Call&, bool backward)> contract;
};

// Copies by name between a Call and a struct whose members carry the declared names (a
// kernel's Args, a reference's Inputs), and from a result struct to named tensors:
//   LAV_TENSORS_FROM(a, call, q, k, v, h0);   // a.q = call.get("q"); ... (undefined if absent)
//   LAV_FLAGS_FROM(a, call, use_norm);         // a.use_norm = call.flag("use_norm");
//   TensorMap m = LAV_NAMED(g, dq, dk, dv);    // {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}}
#define LAV_TENSORS_FROM(to, call, ...) LAV_FOR_EACH(LAV_TENSOR_FROM_, to, call, __VA_ARGS__)
#define LAV_FLAGS_FROM(to, call, ...) LAV_FOR_EACH(LAV_FLAG_FROM_, to, call, __VA_ARGS__)
#define LAV_NAMED(from, ...) \
    ::lav::TensorMap { LAV_FOR_EACH(LAV_NAMED_, from, _, __VA_ARGS__) }

#define LAV_TENSOR_FROM_(to, call, name) to.name = (call).get(#name);
#define LAV_FLAG_FROM_(to, call, name) to.name = (call).flag(#name);
#define LAV_NAMED_(from, unused, name) {#name, (from).name},
// LAV_FOR_EACH(m, x, y, a, b, ...) expands to m(x, y, a) m(x, y, b) ..., up to 12 names
#define LAV_FE_1(m, x, y, a) m(x, y, a)
#define LAV_FE_2(m, x, y, a, ...) m(x, y, a) LAV_FE_1(m, x, y, __VA_ARGS__)
#define LAV_FE_3(m, x, y, a, ...) m(x, y, a) LAV_FE_2(m, x, y, __VA_ARGS__)
#define LAV_FE_4(m, x, y, a, ...) m(x, y, a) LAV_FE_3(m, x, y, __VA_ARGS__)
#define LAV_FE_5(m, x, y, a, ...) m(x, y, a) LAV_FE_4(m, x, y, __VA_ARGS__)
#define LAV_FE_6(m, x, y, a, ...) m(x, y, a) LAV_FE_5(m, x, y, __VA_ARGS__)
#define LAV_FE_7(m, x, y, a, ...) m(x, y, a) LAV_FE_6(m, x, y, __VA_ARGS__)
#define LAV_FE_8(m, x, y, a, ...) m(x, y, a) LAV_FE_7(m, x, y, __VA_ARGS__)
#define LAV_FE_9(m, x, y, a, ...) m(x, y, a) LAV_FE_8(m, x, y, __VA_ARGS__)
#define LAV_FE_10(m, x, y, a, ...) m(x, y, a) LAV_FE_9(m, x, y, __VA_ARGS__)
#define LAV_FE_11(m, x, y, a, ...) m(x, y, a) LAV_FE_10(m, x, y, __VA_ARGS__)
#define LAV_FE_12(m, x, y, a, ...) m(x, y, a) LAV_FE_11(m, x, y, __VA_ARGS__)
#define LAV_FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, NAME, ...) NAME
#define LAV_FOR_EACH(m, x, y, ...)                                                          \
    LAV_FE_PICK(__VA_ARGS__, LAV_FE_12, LAV_FE_11, LAV_FE_10, LAV_FE_9, LAV_FE_8, LAV_FE_7, \
                LAV_FE_6, LAV_FE_5, LAV_FE_4, LAV_FE_3, LAV_FE_2, LAV_FE_1)                 \
    (m, x, y, __VA_ARGS__)

/// What the build's GPU backend says of the machine, as report run attributes: "gpu",
/// "compute_capability", "cuda_driver", "cuda_runtime" (those it can tell).
using DeviceProbe = std::function<std::map<std::string, std::string>()>;

class RowTable {
  public:
    /// Adds a row; a second row for one (family, variant, backend) is an InternalError.
    void add(Row row);
    /// Set by a CUDA build (kernels/common/glue/cuda_device.cpp); empty otherwise.
    void set_device_probe(DeviceProbe probe) { device_probe_ = std::move(probe); }
    const DeviceProbe& device_probe() const { return device_probe_; }
    /// The row, or nullptr when this build has none.
    const Row* find(const std::string& family, const std::string& variant,
                    const std::string& backend) const;
    const std::vector<Row>& rows() const { return rows_; }
    /// Records why `backend` has no row for (family, variant): an outside kernel's provider
    /// knows what its library lacks (FLA has no recurrent Based).
    void add_absence(const std::string& family, const std::string& variant,
                     const std::string& backend, std::string reason);
    /// What a record of (family, variant) under `backend` says when no row runs it.
    std::string absence(const std::string& family, const std::string& variant,
                        const std::string& backend) const;

  private:
    std::vector<Row> rows_;
    std::map<std::tuple<std::string, std::string, std::string>, std::string> absences_;
    DeviceProbe device_probe_;
};

/// Seconds the rows of outside kernels have spent compiling and autotuning them in this process,
/// as their providers count it (a Python provider's jit_seconds()): the runner takes the
/// difference around a record's kernel call.
double jit_seconds();
void add_jit_seconds(double seconds);

}  // namespace lav
