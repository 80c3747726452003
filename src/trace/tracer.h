// src/trace/tracer.h — the dtype tracer: each aten op's tensors and their producers; no analysis.
//
// A TraceScope installs a thread-local at::RecordFunction callback for its lifetime: inputs are
// read in the start callback and outputs in the end callback (LibTorch 2.x asserts when inputs
// are read at the end). Each aten op becomes an OpRecord; each input names the op that produced
// it (by tensor identity), so a dtype can be followed back to where it changed. Tracing is off
// unless a scope is open, and costs nothing then: no callback is installed.
//
//   trace::TraceScope scope;
//   scope.trace().label(k_a, "k_a", trace::Role::parameter);  // names show up in findings
//   at::Tensor k2 = at::addcmul(k, k * (a - 1), k_a);
//   scope.trace().label(k2, "k");
//   trace::Trace t = scope.stop();                              // tracing ends here
//   for (const auto& op : t.ops()) ...
//
// Identity: a tensor is its TensorImpl. The producer map holds a weak reference to every
// TensorImpl it knows, so a freed tensor's address cannot be reused by a new tensor while the
// map still names it. An op that returns one of its inputs (add_, copy_, an out= variant)
// becomes that tensor's producer; a view (transpose, narrow, select) is a new TensorImpl whose
// producer is the view op. A write through a view (x.narrow(0, a, n).copy_(y)) makes the writer
// the producer of the view only: x keeps its own producer. Ops run on other threads (at::launch
// tasks) are not recorded.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trace/mapped_array.h"

namespace at {
struct RecordFunction;
struct ObserverContext;
}  // namespace at

namespace lav::trace {

/// What a labelled tensor is to the case; shown next to its name in findings.
enum class Role { unspecified, input, parameter, buffer, state };

/// "input", "parameter", "buffer", "state"; "" for unspecified.
const char* role_name(Role role);

/// One tensor as an op saw it.
struct TensorInfo {
    std::string label;  ///< name given with Trace::label before this use, "" if none
    Role role = Role::unspecified;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    std::vector<int64_t> shape;
    c10::Device device{c10::kCPU};
    int64_t producer = -1;    ///< seq of the op that produced it; -1: created outside the trace
    int producer_output = 0;  ///< which output of the producer it was
    int inplace_of = -1;      ///< outputs only: the input index it is (same TensorImpl)
    int view_of = -1;         ///< outputs only: the input index whose storage it views
    bool has_nan = false;     ///< held a NaN (only in a scope that checks values)
    bool has_inf = false;     ///< held ±Inf (only in a scope that checks values)
};

/// One aten op.
struct OpRecord {
    int64_t seq = 0;        ///< 0, 1, 2, ... in call order (top-level and nested ops)
    std::string op;         ///< "aten::addcmul"
    int depth = 0;          ///< 0 for ops called directly, > 0 for ops inside another op
    bool autocast = false;  ///< autocast was on for the op's device when it started
    std::string site;  ///< depth 0: the caller's source place ("rwkv7.py:117"), "" when unknown
    std::vector<TensorInfo> inputs;  ///< tensor inputs only (scalars are left out); lists flattened
    std::vector<TensorInfo> outputs;
};

/// The ops recorded by one TraceScope, and what is known of the tensors they touched.
///
/// While recording, ops are kept in flat arrays mapped apart from the malloc heap (no
/// allocation per op, and no block of the tracer's between the traced code's buffers, which
/// changes how glibc trims and faults back its heap), and each distinct shape once; ops()
/// builds the OpRecords from them on first use. Not thread-safe.
class Trace {
  public:
    Trace();
    ~Trace();
    Trace(Trace&&) noexcept;
    Trace& operator=(Trace&&) noexcept;
    Trace(const Trace&) = delete;
    Trace& operator=(const Trace&) = delete;

    /// Every op in call order; ops()[i].seq == i.
    const std::vector<OpRecord>& ops() const;

    /// The number of ops recorded so far (cheaper than ops().size() while recording).
    size_t size() const { return raw_ops_.size(); }

    /// Op `seq` alone (cheaper than ops()[seq] while recording).
    OpRecord op(int64_t seq) const;

    /// Names `tensor`: later uses carry the name in TensorInfo::label, and the output record of
    /// the op that produced it (if any) gets it too. A later label replaces an earlier one.
    void label(const at::Tensor& tensor, std::string name, Role role = Role::unspecified);

    /// The seq of the op that last produced or modified `tensor`; -1 if none in this trace.
    int64_t producer_of(const at::Tensor& tensor) const;

    /// The output slot of producer_of(tensor) that `tensor` is; 0 when it has no producer.
    int producer_output_of(const at::Tensor& tensor) const;

    /// The label of `tensor`, "" if it has none.
    std::string label_of(const at::Tensor& tensor) const;

    /// The role given with the label of `tensor`.
    Role role_of(const at::Tensor& tensor) const;

    /// Where the code that calls the traced ops stands, asked at each depth-0 op: a C string
    /// ("rwkv7.py:117") that stays valid for the trace's life, or nullptr. The embedded Python
    /// sets one for a Python prologue (providers/python.cpp); null (the default) asks nothing.
    using SiteSource = const char* (*)();
    void set_site_source(SiteSource source) { site_source_ = source; }

  private:
    friend class TraceScope;

    // one tensor use, as recorded
    struct RawTensor {
        int64_t producer = -1;
        uint32_t shape = 0;  // into shape_begin_
        int32_t label = -1;  // into labels_
        int32_t producer_output = 0;
        int32_t inplace_of = -1;
        int32_t view_of = -1;
        c10::ScalarType dtype = c10::ScalarType::Undefined;
        c10::Device device{c10::kCPU};
        bool has_nan = false;
        bool has_inf = false;
    };
    // one op, as recorded; its inputs and outputs are ranges of tensors_
    struct RawOp {
        uint32_t name = 0;  // into names_
        uint32_t inputs_begin = 0, inputs_count = 0;
        uint32_t outputs_begin = 0, outputs_count = 0;
        int32_t depth = 0;
        int32_t site = -1;  // into names_; -1: unknown
        bool autocast = false;
    };
    struct Label {
        std::string name;
        Role role;
    };
    // what the producer map knows of a tensor
    struct Known {
        c10::TensorImpl* key = nullptr;  // null: an empty slot
        int64_t producer = -1;
        int32_t producer_output = 0;
        int32_t label = -1;
        int8_t values = -1;  // check_values: has_nan | has_inf << 1 when last seen; -1: unseen
    };
    // The producer map: the tensors seen as outputs or labelled, by TensorImpl, in one
    // open-addressing table (linear probing, at most half full). It holds a weak reference
    // to each (c10::raw::weak_intrusive_ptr), so that a freed tensor's address cannot be
    // reused while an entry names it. Dead tensors are dropped, and released, when the map
    // reaches prune_at_ entries; each new entry is also looked at again kYoung entries later,
    // when a temporary has usually died, so that most are released soon after they die.
    class ProducerMap {
      public:
        ProducerMap();
        ~ProducerMap();
        ProducerMap(ProducerMap&& other) noexcept;
        ProducerMap& operator=(ProducerMap&& other) noexcept;
        ProducerMap(const ProducerMap&) = delete;
        ProducerMap& operator=(const ProducerMap&) = delete;

        /// The entry of `impl`; nullptr when the map has none.
        const Known* find(const c10::TensorImpl* impl) const;
        /// The entry of `impl`, made (with no producer) if the map has none. Valid until the
        /// next call.
        Known& remember(c10::TensorImpl* impl);

      private:
        static constexpr size_t kYoung = 8;
        void drop_if_dead(const c10::TensorImpl* impl);
        void erase_at(size_t slot);
        void prune();
        void release_all();

        MappedArray<Known> slots_;  // a power of two of them; empty once moved from
        size_t count_ = 0;
        size_t prune_at_;
        MappedArray<Known> live_;  // scratch space of prune()
        // the last kYoung entries made, oldest at young_next_; null: none
        c10::TensorImpl* young_[kYoung] = {};
        size_t young_next_ = 0;
    };
    // a direct-mapped cache from op-name pointers to names_
    struct NameSlot {
        const char* name = nullptr;
        uint32_t id = 0;
    };
    // a direct-mapped cache of shapes of up to kSlotDims dims, sizes inline: a hit reads one
    // cache line
    static constexpr size_t kSlotDims = 6;
    struct ShapeSlot {
        uint32_t id = 0;
        int32_t dims = -1;  // -1: empty slot
        int64_t sizes[kSlotDims] = {};
    };
    // an op started and not yet ended; its tensor inputs are open_inputs_[inputs_begin, ...)
    struct Open {
        int64_t seq = 0;
        uint32_t inputs_begin = 0;
    };
    struct OpenInput {
        const c10::TensorImpl* impl = nullptr;
        const void* storage = nullptr;  // null when it has none
    };

    void on_start(const at::RecordFunction& fn);
    void on_end(const at::RecordFunction& fn);
    void record_tensor(RawTensor& raw, const at::Tensor& t);
    void record_values(RawTensor& raw, const at::Tensor& t, bool produced);
    bool check_values_ = false;
    SiteSource site_source_ = nullptr;
    uint32_t intern_name(const char* name);
    const char* name(uint32_t id) const { return name_chars_.data() + name_begin_[id]; }
    uint32_t intern_shape(c10::IntArrayRef sizes);
    TensorInfo materialize(const RawTensor& raw) const;
    OpRecord materialize(int64_t seq) const;

    MappedArray<RawOp> raw_ops_;
    MappedArray<RawTensor> tensors_;
    // shape s is dims_[shape_begin_[s], shape_begin_[s + 1])
    MappedArray<int64_t> dims_;
    MappedArray<uint32_t> shape_begin_;
    MappedArray<ShapeSlot> shape_cache_;
    // name i is the NUL-terminated string at name_chars_[name_begin_[i]]
    MappedArray<char> name_chars_;
    MappedArray<uint32_t> name_begin_;
    MappedArray<NameSlot> name_cache_;
    // labels are given by the caller between ops, not per op: kept on the heap
    std::vector<Label> labels_;
    // the ops started and not yet ended, innermost last, and their inputs
    MappedArray<Open> open_;
    MappedArray<OpenInput> open_inputs_;
    ProducerMap known_;
    // ops() builds records from raw_ops_ as far as they are complete
    mutable std::vector<OpRecord> ops_;
};

/// Opens tracing on this thread for its lifetime (or until stop()). Scopes do not nest:
/// opening a second one on the same thread throws InternalError.
class TraceScope {
  public:
    /// With `check_values`, every floating tensor an op takes or returns is also scanned for
    /// NaN and Inf (TensorInfo::has_nan, has_inf): once when an op returns it or when it is
    /// first used, by one sum that shows a finite tensor (element-wise tests only where the sum
    /// is not finite); for short op chains such as a prologue, where the first op to make a NaN
    /// is worth its cost. A write through a view of a tensor is not seen on the tensor itself.
    explicit TraceScope(bool check_values = false);
    ~TraceScope();
    TraceScope(const TraceScope&) = delete;
    TraceScope& operator=(const TraceScope&) = delete;

    /// The trace being recorded.
    Trace& trace();

    /// Ends tracing and hands over the trace; trace() must not be called afterwards.
    Trace stop();

    /// Whether a scope is open on this thread.
    static bool active();

  private:
    static std::unique_ptr<at::ObserverContext> start_callback(const at::RecordFunction& fn);
    static void end_callback(const at::RecordFunction& fn, at::ObserverContext* ctx);
    void close();

    std::unique_ptr<Trace> trace_;
    uint64_t handle_ = 0;
};

/// "bf16[2,64,4,16]", with " cuda:0" appended for tensors not on the CPU.
std::string describe(const TensorInfo& info);

}  // namespace lav::trace
