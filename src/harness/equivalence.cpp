// src/harness/equivalence.cpp — variants, layouts and sequences of one case compared.
#include "harness/equivalence.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/layout.h"
#include "core/text.h"
#include "core/varlen.h"
#include "harness/judge.h"

namespace lav::harness {
namespace {

using scenario::Case;

// the declaration a call tensor or a measured result comes from: "dq" is q's gradient
const TensorDecl* decl_of(const Family& family, const std::string& name) {
    for (const TensorDecl& t : family.tensors)
        if (t.name == name) return &t;
    if (name.size() > 1 && name[0] == 'd') return decl_of(family, name.substr(1));
    return nullptr;
}

double l2(const at::Tensor& t) { return t.to(at::kDouble).norm().item<double>(); }

// ‖a − b‖ / ‖reference‖ ("bitwise" when a and b are equal)
std::string difference(const at::Tensor& a, const at::Tensor& b, const at::Tensor& reference) {
    if (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a, b))
        return "bitwise";
    const double base = l2(reference);
    return sci(base > 0 ? l2(a.to(at::kDouble) - b.to(at::kDouble)) / base : 0.0);
}

// "o bitwise, ht 2.1e-07" over the tensors both maps hold
std::string compare(const TensorMap& a, const TensorMap& b, const TensorMap& gold) {
    std::string out;
    for (const auto& [name, x] : a) {
        const auto it = b.find(name);
        if (it == b.end() || !gold.count(name)) continue;
        out += (out.empty() ? "" : ", ") + name + " " + difference(x, it->second, gold.at(name));
    }
    return out;
}

// the call in the other layout: every time-major tensor permuted, values unchanged
Call flipped(const Case& c, const Family& family, Call call) {
    const Layout other = c.layout == Layout::head_last ? Layout::head_first : Layout::head_last;
    for (auto& [name, t] : call.tensors) {
        const TensorDecl* d = decl_of(family, name);
        if (d && time_dim(*d) >= 0 && t.defined())
            t = from_head_last(to_head_last(t, c.layout), other).contiguous();
    }
    call.layout = other;
    return call;
}

// sequence `s` of a varlen call alone: its rows of every time-major tensor, its row of every
// per-sequence one; false when a tensor has a time axis the sequences cannot be cut from
bool alone(const Case& c, const Family& family, const Sequence& s, Call& call) {
    for (auto& [name, t] : call.tensors) {
        const TensorDecl* d = decl_of(family, name);
        if (!d || !t.defined()) continue;
        const auto axes = axes_of(*d);
        const int64_t time = time_dim(*d);
        if (time >= 0) {
            if (axes[time].size() != 1) return false;
            const int64_t dim = c.layout == Layout::head_first && time == 1 ? 2 : time;
            t = t.narrow(dim, s.begin, s.length()).contiguous();
        } else if (!axes.empty() && axes[0] == std::vector<std::string>{"N"}) {
            t = t.narrow(0, s.index, 1).contiguous();
        }
    }
    call.cu_seqlens.clear();
    call.dims["T"] = s.length();
    call.dims["N"] = 1;
    call.dims["B"] = 1;
    return true;
}

// a result's rows of sequence `s`: along time, or its row of a per-sequence result
at::Tensor rows_of(const MeasuredSpec& m, const at::Tensor& x, const Sequence& s) {
    return m.time_dim >= 0 ? x.narrow(m.time_dim, s.begin, s.length()) : x.narrow(0, s.index, 1);
}

TensorMap run(const Row& row, const Call& call, bool backward) {
    return backward ? row.backward(call) : row.forward(call);
}

double bound_of(const report::CaseRecord& r, const std::string& tensor) {
    for (const auto& m : r.metrics)
        if (m.tensor == tensor) return m.bound;
    return 0;
}

void sequences_alone(const Case& c, const Family& family, const std::vector<MeasuredSpec>& measured,
                     const TensorMap& gold, const Ran& ran, report::CaseRecord& record,
                     std::vector<std::string>& parts) {
    std::string agreement, errors;
    for (const Sequence& s : sequences(c.B, c.T, c.cu_seqlens)) {
        if (s.length() == 0) continue;
        Call call = ran.call;
        if (!alone(c, family, s, call) || (ran.row->fits && !ran.row->fits(call))) return;
        Case one = c;
        one.cu_seqlens.clear();
        const TensorMap results =
            measured_results(one, measured, run(*ran.row, call, ran.backward));
        std::string seq_diff, seq_err;
        for (const MeasuredSpec& m : measured) {
            const auto it = ran.results.find(m.name);
            const TensorDecl* d = decl_of(family, m.name);
            const bool per_sequence =
                m.time_dim >= 0 || (d && !axes_of(*d).empty() && axes_of(*d)[0][0] == "N");
            if (it == ran.results.end() || !results.count(m.name) || !per_sequence) continue;
            const at::Tensor mine = rows_of(m, it->second, s), ref = rows_of(m, gold.at(m.name), s);
            const std::string d_text = difference(mine, results.at(m.name), ref);
            seq_diff += (seq_diff.empty() ? "" : ", ") + m.name + " " + d_text;
            const double base = l2(ref);
            const double err = base > 0 ? l2(mine.to(at::kDouble) - ref) / base : 0.0;
            if (m.time_dim >= 0) seq_err += (seq_err.empty() ? "" : ", ") + m.name + " " + sci(err);
            const double leak = d_text == "bitwise" ? 0 : std::stod(d_text);
            const double bound = bound_of(record, m.name);
            if (bound > 0 && leak > 0.5 * bound)
                record.findings.push_back(
                    {"SEGMENT_LEAK", m.name,
                     "sequence " + std::to_string(s.index) + " (positions " +
                         std::to_string(s.begin) + " to " + std::to_string(s.end) +
                         ") differs from the same sequence run alone by " + sci(leak) +
                         " of its reference's norm, more than half the bound " + sci(bound) +
                         ": its result depends on its neighbours",
                     ""});
        }
        const std::string which = "#" + std::to_string(s.index) + " ";
        agreement += (agreement.empty() ? "" : "; ") + which + seq_diff;
        errors += (errors.empty() ? "" : "; ") + which + seq_err;
    }
    if (!agreement.empty()) parts.push_back("vs each sequence run alone: " + agreement);
    if (!errors.empty()) parts.push_back("rel_rmse per sequence: " + errors);
}

}  // namespace

void add_equivalence(const Case& c, const Family& family, const std::vector<MeasuredSpec>& fwd,
                     const std::vector<MeasuredSpec>& bwd, const TensorMap& gold,
                     const std::vector<Ran>& ran, bool reruns,
                     std::vector<report::CaseRecord>& records) {
    for (const Ran& r : ran) {
        report::CaseRecord& record = records[r.record];
        const std::vector<MeasuredSpec>& measured = r.backward ? bwd : fwd;
        std::vector<std::string> parts;
        for (const Ran& other : ran)
            if (&other != &r && records[other.record].backend == record.backend &&
                other.backward == r.backward)
                parts.push_back("vs " + records[other.record].variant + ": " +
                                compare(r.results, other.results, gold));
        // a rerun that a kernel refuses is said, not fatal: the record's own run stands
        if (reruns) try {
                const Call call = flipped(c, family, r.call);
                if (!r.row->fits || r.row->fits(call)) {
                    Case other = c;
                    other.layout = call.layout;
                    const TensorMap results =
                        measured_results(other, measured, run(*r.row, call, r.backward));
                    parts.push_back("vs " + std::string(layout_name(call.layout)) + ": " +
                                    compare(r.results, results, gold));
                }
                if (!c.cu_seqlens.empty())
                    sequences_alone(c, family, measured, gold, r, record, parts);
            } catch (const InternalError&) {
                throw;
            } catch (const std::exception& e) {
                parts.push_back(std::string("a rerun failed: ") + e.what());
            }
        std::string text;
        for (const auto& p : parts) text += (text.empty() ? "" : " | ") + p;
        if (!text.empty()) record.findings.push_back({"EQUIVALENCE", "", text, ""});
    }
}

}  // namespace lav::harness
