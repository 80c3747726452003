// src/trace/tracer.cpp — TraceScope's RecordFunction callbacks and producer map; no analysis.
#include "trace/tracer.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace lav::trace {
namespace {

// the trace recorded on this thread; null while no scope is open here
thread_local Trace* tls_trace = nullptr;

// dead tensors are dropped from the producer map when it holds this many entries, or twice
// the live ones left by the last pruning if more: O(1) a tensor, and few dead TensorImpls
// pinned between the traced code's buffers
constexpr size_t kFirstPrune = 256;

// ops reserved for at first; a trace grows past it as it must
constexpr size_t kReserveOps = 16384;

// slots of the op-name and shape caches (powers of two)
constexpr size_t kNameCache = 256;
constexpr size_t kShapeCache = 256;

// Fibonacci hashing of a pointer; the low 4 bits of heap addresses carry nothing
size_t slot_hash(const void* p) {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 32);
}

// calls f on every defined tensor in `values`, flattening lists (TensorList, List<Tensor?>)
template <typename Values, typename F>
void for_each_tensor(const Values& values, F&& f) {
    for (const c10::IValue& v : values) {
        if (v.isTensor()) {
            const at::Tensor& t = v.toTensor();
            if (t.defined()) f(t);
        } else if (v.isList()) {
            for (const c10::IValue& e : v.toListRef())
                if (e.isTensor() && e.toTensor().defined()) f(e.toTensor());
        }
    }
}

const void* storage_of(const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    // unsafe_storage() never throws, unlike storage() on tensors that forbid storage access
    return impl->has_storage() ? impl->unsafe_storage().unsafeGetStorageImpl() : nullptr;
}

}  // namespace

const char* role_name(Role role) {
    switch (role) {
        case Role::input:
            return "input";
        case Role::parameter:
            return "parameter";
        case Role::buffer:
            return "buffer";
        case Role::state:
            return "state";
        case Role::unspecified:
            break;
    }
    return "";
}

std::string describe(const TensorInfo& info) {
    std::string out = scalar_type_name(info.dtype);
    out += '[';
    for (size_t i = 0; i < info.shape.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(info.shape[i]);
    }
    out += ']';
    if (!info.device.is_cpu()) out += ' ' + info.device.str();
    return out;
}

// ---- Trace ----

Trace::Trace() {
    // reserving costs address space only: pages are backed as they are written
    raw_ops_.reserve(kReserveOps);
    tensors_.reserve(3 * kReserveOps);
    shape_begin_.push_back(0);
    shape_cache_.assign(kShapeCache, ShapeSlot{});
    name_cache_.assign(kNameCache, NameSlot{});
}
Trace::~Trace() = default;
Trace::Trace(Trace&&) noexcept = default;
Trace& Trace::operator=(Trace&&) noexcept = default;

const std::vector<OpRecord>& Trace::ops() const {
    // an op still open (only while inside an op's callbacks) has no outputs yet
    const size_t complete = open_.empty() ? raw_ops_.size() : static_cast<size_t>(open_[0].seq);
    while (ops_.size() < complete) ops_.push_back(materialize(static_cast<int64_t>(ops_.size())));
    return ops_;
}

OpRecord Trace::op(int64_t seq) const {
    LAV_ASSERT(seq >= 0 && seq < static_cast<int64_t>(raw_ops_.size()), "trace: no op #", seq);
    return materialize(seq);
}

TensorInfo Trace::materialize(const RawTensor& raw) const {
    TensorInfo info;
    if (raw.label >= 0) {
        info.label = labels_[raw.label].name;
        info.role = labels_[raw.label].role;
    }
    info.dtype = raw.dtype;
    info.shape.assign(dims_.begin() + shape_begin_[raw.shape],
                      dims_.begin() + shape_begin_[raw.shape + 1]);
    info.device = raw.device;
    info.producer = raw.producer;
    info.producer_output = raw.producer_output;
    info.inplace_of = raw.inplace_of;
    info.view_of = raw.view_of;
    info.has_nan = raw.has_nan;
    info.has_inf = raw.has_inf;
    return info;
}

OpRecord Trace::materialize(int64_t seq) const {
    const RawOp& raw = raw_ops_[seq];
    OpRecord rec;
    rec.seq = seq;
    rec.op = name(raw.name);
    rec.depth = raw.depth;
    rec.autocast = raw.autocast;
    if (raw.site >= 0) rec.site = name(static_cast<uint32_t>(raw.site));
    rec.inputs.reserve(raw.inputs_count);
    for (uint32_t i = 0; i < raw.inputs_count; ++i)
        rec.inputs.push_back(materialize(tensors_[raw.inputs_begin + i]));
    rec.outputs.reserve(raw.outputs_count);
    for (uint32_t i = 0; i < raw.outputs_count; ++i)
        rec.outputs.push_back(materialize(tensors_[raw.outputs_begin + i]));
    return rec;
}

void Trace::label(const at::Tensor& tensor, std::string name, Role role) {
    LAV_CHECK(tensor.defined(), "trace: cannot label an undefined tensor as '", name, "'");
    Known& known = known_.remember(tensor.unsafeGetTensorImpl());
    known.label = static_cast<int32_t>(labels_.size());
    if (known.producer >= 0) {
        const RawOp& producer = raw_ops_[known.producer];
        if (known.producer_output < static_cast<int32_t>(producer.outputs_count))
            tensors_[producer.outputs_begin + known.producer_output].label = known.label;
        if (known.producer < static_cast<int64_t>(ops_.size())) {
            TensorInfo& out = ops_[known.producer].outputs[known.producer_output];
            out.label = name;
            out.role = role;
        }
    }
    labels_.push_back({std::move(name), role});
}

int64_t Trace::producer_of(const at::Tensor& tensor) const {
    const Known* known = tensor.defined() ? known_.find(tensor.unsafeGetTensorImpl()) : nullptr;
    return known == nullptr ? -1 : known->producer;
}

int Trace::producer_output_of(const at::Tensor& tensor) const {
    const Known* known = tensor.defined() ? known_.find(tensor.unsafeGetTensorImpl()) : nullptr;
    return known == nullptr || known->producer < 0 ? 0 : known->producer_output;
}

std::string Trace::label_of(const at::Tensor& tensor) const {
    const Known* known = tensor.defined() ? known_.find(tensor.unsafeGetTensorImpl()) : nullptr;
    return known == nullptr || known->label < 0 ? "" : labels_[known->label].name;
}

Role Trace::role_of(const at::Tensor& tensor) const {
    const Known* known = tensor.defined() ? known_.find(tensor.unsafeGetTensorImpl()) : nullptr;
    return known == nullptr || known->label < 0 ? Role::unspecified : labels_[known->label].role;
}

// ---- Trace::ProducerMap ----

Trace::ProducerMap::ProducerMap() : prune_at_(kFirstPrune) {
    // at most prune_at_ entries until the next pruning: at most half full
    slots_.assign(2 * kFirstPrune, Known{});
    live_.reserve(kFirstPrune);
}

Trace::ProducerMap::~ProducerMap() { release_all(); }

Trace::ProducerMap::ProducerMap(ProducerMap&& other) noexcept
    : slots_(std::move(other.slots_)),
      count_(std::exchange(other.count_, 0)),
      prune_at_(other.prune_at_),
      young_next_(other.young_next_) {
    std::copy(std::begin(other.young_), std::end(other.young_), std::begin(young_));
}

Trace::ProducerMap& Trace::ProducerMap::operator=(ProducerMap&& other) noexcept {
    if (this != &other) {
        release_all();
        slots_ = std::move(other.slots_);
        count_ = std::exchange(other.count_, 0);
        prune_at_ = other.prune_at_;
        std::copy(std::begin(other.young_), std::end(other.young_), std::begin(young_));
        young_next_ = other.young_next_;
    }
    return *this;
}

void Trace::ProducerMap::release_all() {
    for (Known& k : slots_)
        if (k.key != nullptr) c10::raw::weak_intrusive_ptr::decref(std::exchange(k.key, nullptr));
    count_ = 0;
}

const Trace::Known* Trace::ProducerMap::find(const c10::TensorImpl* impl) const {
    // a moved-from map has no slots
    if (slots_.empty()) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_hash(impl) & mask;; i = (i + 1) & mask) {
        if (slots_[i].key == impl) return &slots_[i];
        if (slots_[i].key == nullptr) return nullptr;
    }
}

Trace::Known& Trace::ProducerMap::remember(c10::TensorImpl* impl) {
    if (const Known* known = find(impl)) return const_cast<Known&>(*known);
    // an entry made kYoung entries ago is most often a temporary that has died since:
    // releasing it now rather than at the next pruning lets the allocator reuse its block at
    // once, instead of serving the traced code from colder memory in the meantime
    if (const c10::TensorImpl* young = std::exchange(young_[young_next_], impl))
        drop_if_dead(young);
    young_next_ = (young_next_ + 1) % kYoung;
    if (count_ >= prune_at_ || slots_.empty()) prune();
    c10::raw::weak_intrusive_ptr::incref(impl);
    const size_t mask = slots_.size() - 1;
    size_t i = slot_hash(impl) & mask;
    while (slots_[i].key != nullptr) i = (i + 1) & mask;
    slots_[i] = Known{};
    slots_[i].key = impl;
    ++count_;
    return slots_[i];
}

void Trace::ProducerMap::drop_if_dead(const c10::TensorImpl* impl) {
    // an entry found is pinned by its weak reference, so its TensorImpl is still there to ask
    const Known* known = find(impl);
    if (known != nullptr && c10::raw::weak_intrusive_ptr::use_count(known->key) == 0)
        erase_at(static_cast<size_t>(known - slots_.data()));
}

void Trace::ProducerMap::erase_at(size_t slot) {
    c10::raw::weak_intrusive_ptr::decref(slots_[slot].key);
    --count_;
    // backward-shift deletion: entries after the hole move into it where their probe sequence
    // passes it, so that no lookup stops early at the hole
    const size_t mask = slots_.size() - 1;
    size_t hole = slot;
    for (size_t i = (hole + 1) & mask; slots_[i].key != nullptr; i = (i + 1) & mask) {
        const size_t home = slot_hash(slots_[i].key) & mask;
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            slots_[hole] = slots_[i];
            hole = i;
        }
    }
    slots_[hole] = Known{};
}

void Trace::ProducerMap::prune() {
    live_.clear();
    for (const Known& k : slots_) {
        if (k.key == nullptr) continue;
        if (c10::raw::weak_intrusive_ptr::use_count(k.key) == 0)
            c10::raw::weak_intrusive_ptr::decref(k.key);
        else
            live_.push_back(k);
    }
    prune_at_ = std::max(kFirstPrune, 2 * live_.size());
    // at most prune_at_ entries until the next pruning: keep the table at most half full
    size_t size = 1;
    while (size < 2 * prune_at_) size *= 2;
    slots_.assign(size, Known{});
    const size_t mask = size - 1;
    for (const Known& k : live_) {
        size_t i = slot_hash(k.key) & mask;
        while (slots_[i].key != nullptr) i = (i + 1) & mask;
        slots_[i] = k;
    }
    count_ = live_.size();
}

// ---- Trace, recording ----

uint32_t Trace::intern_name(const char* name) {
    // op names are mostly schema names that live as long as the op registry, so the pointer
    // is a good key; the content check covers names that do not
    NameSlot& cached = name_cache_[slot_hash(name) & (kNameCache - 1)];
    if (cached.name == name && std::strcmp(this->name(cached.id), name) == 0) return cached.id;
    uint32_t id = 0;
    while (id < name_begin_.size() && std::strcmp(this->name(id), name) != 0) ++id;
    if (id == name_begin_.size()) {
        name_begin_.push_back(static_cast<uint32_t>(name_chars_.size()));
        name_chars_.append(name, name + std::strlen(name) + 1);
    }
    cached = {name, id};
    return id;
}

uint32_t Trace::intern_shape(c10::IntArrayRef sizes) {
    // a trace holds few distinct shapes: keeping each once, rather than every tensor's sizes,
    // keeps the trace small, and its memory is new pages the traced code waits on (page faults)
    const size_t dims = sizes.size();
    uint64_t hash = dims;
    for (const int64_t d : sizes) hash = (hash ^ static_cast<uint64_t>(d)) * 0x9E3779B97F4A7C15ull;
    ShapeSlot& cached = shape_cache_[(hash >> 40) & (kShapeCache - 1)];
    if (cached.dims == static_cast<int32_t>(dims) &&
        std::equal(sizes.begin(), sizes.end(), cached.sizes))
        return cached.id;
    // a new shape, or one whose slot another has taken since: kept (again)
    const auto id = static_cast<uint32_t>(shape_begin_.size() - 1);
    dims_.append(sizes.begin(), sizes.end());
    shape_begin_.push_back(static_cast<uint32_t>(dims_.size()));
    if (dims <= kSlotDims) {
        cached.id = id;
        cached.dims = static_cast<int32_t>(dims);
        std::copy(sizes.begin(), sizes.end(), cached.sizes);
    }
    return id;
}

void Trace::record_tensor(RawTensor& raw, const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    raw.dtype = t.scalar_type();
    raw.device = t.device();
    // nested and symbolic-shape tensors throw on sizes(); they keep an empty shape
    const bool sized = !impl->is_nested() && !impl->has_symbolic_sizes_strides();
    raw.shape = intern_shape(sized ? impl->sizes() : c10::IntArrayRef());
}

void Trace::record_values(RawTensor& raw, const at::Tensor& t, bool produced) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->is_nested() || impl->has_symbolic_sizes_strides() || !at::isFloatingType(raw.dtype) ||
        t.numel() == 0 || !t.has_storage())
        return;
    // a tensor is scanned when an op makes it or when it is first used, not at every use
    Known& known = known_.remember(const_cast<c10::TensorImpl*>(impl));
    if (produced || known.values < 0) {
        // the scan's own ops must not be traced
        at::DisableRecordFunctionGuard untraced;
        // one sum shows most tensors finite; only a non-finite sum is looked at element-wise
        const at::ScalarType wide = at::promote_types(raw.dtype, at::kFloat);
        if (at::isfinite(at::sum(t, wide)).item<bool>())
            known.values = 0;
        else
            known.values = static_cast<int8_t>(at::isnan(t).any().item<bool>() |
                                               at::isinf(t).any().item<bool>() << 1);
    }
    raw.has_nan = (known.values & 1) != 0;
    raw.has_inf = (known.values & 2) != 0;
}

void Trace::on_start(const at::RecordFunction& fn) {
    const int64_t seq = static_cast<int64_t>(raw_ops_.size());
    RawOp& op = raw_ops_.emplace_back();
    op.name = intern_name(fn.name());
    op.depth = static_cast<int32_t>(open_.size());
    if (site_source_ != nullptr && op.depth == 0)
        if (const char* site = site_source_()) op.site = static_cast<int32_t>(intern_name(site));
    op.inputs_begin = static_cast<uint32_t>(tensors_.size());
    open_.push_back({seq, static_cast<uint32_t>(open_inputs_.size())});
    for_each_tensor(fn.inputs(), [&](const at::Tensor& t) {
        RawTensor& raw = tensors_.emplace_back();
        record_tensor(raw, t);
        // the weak references in known_ keep a freed tensor's address from being reused, so
        // an entry found here is this very tensor
        if (const Known* known = known_.find(t.unsafeGetTensorImpl())) {
            raw.producer = known->producer;
            raw.producer_output = known->producer_output;
            raw.label = known->label;
        }
        if (check_values_) record_values(raw, t, /*produced=*/false);
        open_inputs_.push_back({t.unsafeGetTensorImpl(), storage_of(t)});
    });
    op.inputs_count = static_cast<uint32_t>(tensors_.size()) - op.inputs_begin;
    if (op.inputs_count > 0)
        op.autocast = at::autocast::is_autocast_enabled(tensors_[op.inputs_begin].device.type());
}

void Trace::on_end(const at::RecordFunction& fn) {
    // an op that started before the scope opened has no open entry here
    if (open_.empty()) return;
    const Open open = open_.back();
    open_.shrink_to(open_.size() - 1);
    // this op's inputs; those of the ops it called have been dropped when they ended
    const OpenInput* inputs = open_inputs_.data() + open.inputs_begin;
    const size_t n_inputs = open_inputs_.size() - open.inputs_begin;
    RawOp& op = raw_ops_[open.seq];
    op.outputs_begin = static_cast<uint32_t>(tensors_.size());
    int32_t slot = 0;
    for_each_tensor(fn.outputs(), [&](const at::Tensor& t) {
        RawTensor& raw = tensors_.emplace_back();
        record_tensor(raw, t);
        const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
        for (size_t i = 0; i < n_inputs; ++i) {
            if (inputs[i].impl == impl) {
                raw.inplace_of = static_cast<int32_t>(i);
                break;
            }
        }
        const void* storage = storage_of(t);
        if (raw.inplace_of < 0 && storage != nullptr) {
            for (size_t i = 0; i < n_inputs; ++i) {
                if (inputs[i].storage == storage) {
                    raw.view_of = static_cast<int32_t>(i);
                    break;
                }
            }
        }
        // the latest op to return a tensor is its producer; an in-place op keeps its label
        Known& known = known_.remember(t.unsafeGetTensorImpl());
        known.producer = open.seq;
        known.producer_output = slot;
        raw.producer = open.seq;
        raw.producer_output = slot;
        raw.label = known.label;
        if (check_values_) record_values(raw, t, /*produced=*/true);
        ++slot;
    });
    op.outputs_count = static_cast<uint32_t>(slot);
    open_inputs_.shrink_to(open.inputs_begin);
    // factory ops have no tensor input: their device is the output's
    if (op.inputs_count == 0 && op.outputs_count > 0)
        op.autocast = at::autocast::is_autocast_enabled(tensors_[op.outputs_begin].device.type());
}

// ---- TraceScope ----

TraceScope::TraceScope(bool check_values) : trace_(std::make_unique<Trace>()) {
    trace_->check_values_ = check_values;
    LAV_ASSERT(tls_trace == nullptr,
               "trace::TraceScope opened while another is open on this thread; trace scopes do "
               "not nest");
    tls_trace = trace_.get();
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&start_callback, &end_callback)
                                             .needsInputs(true)
                                             .needsOutputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
}

TraceScope::~TraceScope() { close(); }

Trace& TraceScope::trace() {
    LAV_ASSERT(trace_ != nullptr, "trace::TraceScope::trace() called after stop()");
    return *trace_;
}

Trace TraceScope::stop() {
    LAV_ASSERT(trace_ != nullptr, "trace::TraceScope::stop() called twice");
    close();
    Trace out = std::move(*trace_);
    trace_.reset();
    return out;
}

bool TraceScope::active() { return tls_trace != nullptr; }

void TraceScope::close() {
    if (handle_ == 0) return;
    at::removeCallback(handle_);
    handle_ = 0;
    tls_trace = nullptr;
}

std::unique_ptr<at::ObserverContext> TraceScope::start_callback(const at::RecordFunction& fn) {
    if (Trace* trace = tls_trace) trace->on_start(fn);
    return nullptr;
}

void TraceScope::end_callback(const at::RecordFunction& fn, at::ObserverContext*) {
    if (Trace* trace = tls_trace) trace->on_end(fn);
}

}  // namespace lav::trace
