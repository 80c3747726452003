// src/trace/analysis.cpp — PROMOTION, DEMOTION, histories and the table; records nothing.
#include "trace/analysis.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace lav::trace {
namespace {

// longer histories fold their unremarkable runs
constexpr size_t kMaxHistorySteps = 12;

bool is_float(c10::ScalarType t) { return c10::isFloatingType(t); }

// "wider" compares bytes per element: fp16 and bf16 are equally wide
size_t width(c10::ScalarType t) { return c10::elementSize(t); }

std::string dtype_str(c10::ScalarType t) { return scalar_type_name(t); }

// "aten::add_" -> "add_"
std::string_view base_name(const std::string& op) {
    const std::string_view name = op;
    const auto colon = name.rfind("::");
    return colon == std::string_view::npos ? name : name.substr(colon + 2);
}

template <size_t N>
bool one_of(std::string_view name, const std::string_view (&names)[N]) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

constexpr std::string_view kCasts[] = {"to", "_to_copy", "type_as", "copy_"};
// ops whose self operand is accumulated into (out-of-place and in-place forms)
constexpr std::string_view kAccumulateSelf[] = {
    "add",     "add_",     "sub",       "sub_",       "addcmul",     "addcmul_",
    "addcdiv", "addcdiv_", "addmm",     "addmm_",     "addbmm",      "addbmm_",
    "baddbmm", "baddbmm_", "addmv",     "addmv_",     "addr",        "addr_",
    "lerp",    "lerp_",    "index_add", "index_add_", "scatter_add", "scatter_add_"};
// in-place ops that replace the values instead of updating them
constexpr std::string_view kOverwrites[] = {"copy_", "fill_", "zero_"};
// in-place ops that change only metadata, not values
constexpr std::string_view kInplaceMetadata[] = {
    "detach_",  "requires_grad_", "resize_", "resize_as_", "set_",      "as_strided_",
    "squeeze_", "unsqueeze_",     "t_",      "transpose_", "swapdims_", "swapaxes_"};
// ops whose output still is their main operand's value, changed only in scale or dtype
constexpr std::string_view kCarriesValue[] = {"to",  "_to_copy", "type_as", "copy_",     "mul",
                                              "div", "neg",      "clone",   "contiguous"};

bool contains(const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

bool is_cast(const OpRecord& op) { return one_of(base_name(op.op), kCasts); }

// the output record a use refers to, when the trace holds it
const TensorInfo* produced(const Trace& trace, const TensorInfo& info) {
    if (info.producer < 0) return nullptr;
    const auto& outputs = trace.ops()[info.producer].outputs;
    return info.producer_output < static_cast<int>(outputs.size()) ? &outputs[info.producer_output]
                                                                   : nullptr;
}

// the label of a use, including one given after the use to the tensor its producer returned
const std::string& label_for(const Trace& trace, const TensorInfo& info) {
    if (!info.label.empty()) return info.label;
    if (const TensorInfo* out = produced(trace, info)) return out->label;
    return info.label;
}

Role role_for(const Trace& trace, const TensorInfo& info) {
    if (!info.label.empty()) return info.role;
    if (const TensorInfo* out = produced(trace, info)) return out->role;
    return info.role;
}

// the operand a history follows through `op`; -1 for factory ops
int main_input(const OpRecord& op) {
    if (op.inputs.empty()) return -1;
    // copy_ writes its source's values into self
    if (base_name(op.op) == "copy_" && op.inputs.size() >= 2) return 1;
    for (size_t i = 0; i < op.inputs.size(); ++i)
        if (is_float(op.inputs[i].dtype)) return static_cast<int>(i);
    return 0;
}

struct Step {
    const OpRecord* op;
    c10::ScalarType in;
    c10::ScalarType out;
    std::string operands;  // "k_a: fp32, #4: fp64"; "" when none differ from the main operand
};

struct Walk {
    std::vector<Step> steps;  // newest first
    std::string origin;       // label, "external", "#<seq>" or a factory op's name
    c10::ScalarType origin_dtype = c10::ScalarType::Undefined;
};

// the operands of `op` other than `main` whose dtype differs from the main operand's
std::string differing_operands(const Trace& trace, const OpRecord& op, int main) {
    std::vector<std::string> seen;
    std::string out;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
        const TensorInfo& in = op.inputs[i];
        if (static_cast<int>(i) == main || !is_float(in.dtype) || in.dtype == op.inputs[main].dtype)
            continue;
        std::string part = tensor_name(trace, in) + ": " + dtype_str(in.dtype);
        if (std::find(seen.begin(), seen.end(), part) != seen.end()) continue;
        if (!out.empty()) out += ", ";
        out += part;
        seen.push_back(std::move(part));
    }
    return out;
}

// follows `start` back along main operands to a labelled or external tensor or a factory op
Walk walk_back(const Trace& trace, const TensorInfo& start) {
    const auto& ops = trace.ops();
    Walk walk;
    const TensorInfo* cur = &start;
    while (true) {
        if (cur->producer < 0 || (cur != &start && !label_for(trace, *cur).empty())) {
            walk.origin = tensor_name(trace, *cur);
            walk.origin_dtype = cur->dtype;
            return walk;
        }
        const OpRecord& op = ops[cur->producer];
        const int main = main_input(op);
        if (main < 0) {
            walk.origin = op.op;
            walk.origin_dtype = cur->dtype;
            return walk;
        }
        const TensorInfo& in = op.inputs[main];
        walk.steps.push_back({&op, in.dtype, cur->dtype, differing_operands(trace, op, main)});
        // a producer always started before its consumer, so this walk ends
        cur = &in;
    }
}

// `info` as the ops that made it, `depth` calls deep: views are seen through, an operand
// repeated (cat(x, x)) is written once, deeper ones are "…"
std::string expression(const Trace& trace, const TensorInfo& info, int depth) {
    const std::string& label = label_for(trace, info);
    if (!label.empty()) return label;
    if (info.producer < 0) return "external";
    const OpRecord& op = trace.ops()[info.producer];
    const TensorInfo* out = produced(trace, info);
    if (out != nullptr && out->view_of >= 0)
        return expression(trace, op.inputs[out->view_of], depth);
    if (depth == 0) return "…";
    std::vector<std::string> operands;
    for (const TensorInfo& in : op.inputs) {
        std::string text = expression(trace, in, depth - 1);
        if (std::find(operands.begin(), operands.end(), text) == operands.end())
            operands.push_back(std::move(text));
    }
    std::string text(base_name(op.op));
    for (size_t i = 0; i < operands.size(); ++i) text += (i ? ", " : "(") + operands[i];
    return operands.empty() ? text : text + ")";
}

bool remarkable(const Step& step) {
    return step.in != step.out || !step.operands.empty() || step.op->autocast;
}

std::string render(const Walk& walk) {
    std::string out = walk.origin + ": " + dtype_str(walk.origin_dtype);
    const bool fold = walk.steps.size() > kMaxHistorySteps;
    size_t run = 0;  // unremarkable steps not yet written
    c10::ScalarType run_dtype = c10::ScalarType::Undefined;
    auto flush = [&](size_t i) {
        if (run == 0) return;
        if (run == 1) {
            out += " —" + walk.steps[i].op->op + "→ " + dtype_str(run_dtype);
        } else {
            out += " —(" + std::to_string(run) + " ops)→ " + dtype_str(run_dtype);
        }
        run = 0;
    };
    for (size_t n = walk.steps.size(); n-- > 0;) {
        const Step& step = walk.steps[n];
        if (fold && !remarkable(step)) {
            ++run;
            run_dtype = step.out;
            if (n == 0 || remarkable(walk.steps[n - 1])) flush(n);
            continue;
        }
        out += " —" + step.op->op;
        if (!step.operands.empty()) out += "(" + step.operands + ")";
        if (step.op->autocast) out += "[autocast]";
        if (!step.op->site.empty()) out += " at " + step.op->site;
        out += "→ " + dtype_str(step.out);
    }
    return out;
}

Finding promotion(const Trace& trace, const OpRecord& op, int narrow_input, int slot) {
    const TensorInfo& out = op.outputs[slot];
    const TensorInfo& narrow = op.inputs[narrow_input];
    std::string name = label_for(trace, out);
    if (name.empty()) name = label_for(trace, narrow);
    if (name.empty()) name = walk_back(trace, narrow).origin;

    Finding f;
    f.kind = "PROMOTION";
    f.tensor = name;
    f.seq = op.seq;
    f.message =
        name + ": " + dtype_str(narrow.dtype) + " -> " + dtype_str(out.dtype) + " at " + op.op;
    if (!op.site.empty()) f.message += " in " + op.site;
    if (op.autocast) f.message += " under autocast";
    if (is_cast(op)) {
        f.message += ", explicit cast";
    } else {
        for (const TensorInfo& in : op.inputs) {
            if (in.dtype != out.dtype) continue;
            f.message += ", operand " + tensor_name(trace, in) + ": " + dtype_str(in.dtype);
            const Role role = role_for(trace, in);
            if (role != Role::unspecified) f.message += std::string(" (") + role_name(role) + ")";
            break;
        }
    }
    f.history = history_of_seq(trace, op.seq, slot);
    return f;
}

// whether `op` accumulates into one of its inputs listed in `hits` (see find_demotions)
bool accumulates_into(const OpRecord& op, const std::vector<int>& hits) {
    const std::string_view name = base_name(op.op);
    if ((name == "add" || name == "sub") && contains(hits, 1)) return true;
    if (!contains(hits, 0)) return false;
    if (one_of(name, kAccumulateSelf)) return true;
    return name.size() > 1 && name.back() == '_' && !one_of(name, kOverwrites) &&
           !one_of(name, kInplaceMetadata);
}

}  // namespace

std::string tensor_name(const Trace& trace, const TensorInfo& info) {
    const std::string& label = label_for(trace, info);
    if (!label.empty()) return label;
    // an unnamed tensor of the user's Python is named by the ops that made it, down to named
    // tensors, and the line that called the last one: "sin(cat(rotary.inv_freq)) at xt.py:31"
    if (info.producer >= 0 && !trace.ops()[info.producer].site.empty())
        return expression(trace, info, 3) + " at " + trace.ops()[info.producer].site;
    if (info.producer >= 0) return "#" + std::to_string(info.producer);
    return "external";
}

std::string history_of_seq(const Trace& trace, int64_t seq, int output) {
    LAV_ASSERT(seq >= 0 && seq < static_cast<int64_t>(trace.ops().size()),
               "history_of_seq: no op #", seq);
    const OpRecord& op = trace.ops()[seq];
    LAV_ASSERT(output >= 0 && output < static_cast<int>(op.outputs.size()), "history_of_seq: op #",
               seq, " (", op.op, ") has no output ", output);
    return render(walk_back(trace, op.outputs[output]));
}

std::string history(const Trace& trace, const at::Tensor& tensor) {
    LAV_CHECK(tensor.defined(), "trace::history: undefined tensor");
    const int64_t producer = trace.producer_of(tensor);
    if (producer >= 0) return history_of_seq(trace, producer, trace.producer_output_of(tensor));
    const std::string label = trace.label_of(tensor);
    return (label.empty() ? "external" : label) + ": " + dtype_str(tensor.scalar_type());
}

std::vector<Finding> find_promotions(const Trace& trace, c10::ScalarType compute) {
    LAV_CHECK(is_float(compute), "find_promotions: the compute dtype must be floating, got ",
              dtype_str(compute));
    const size_t compute_width = width(compute);
    const auto narrow = [&](c10::ScalarType t) { return is_float(t) && width(t) <= compute_width; };
    const auto wide = [&](c10::ScalarType t) { return is_float(t) && width(t) > compute_width; };

    const auto& ops = trace.ops();
    // roots[seq][output]: the root op of that output's wide dtype; -1 when it is not wide or
    // did not come from a promotion
    std::vector<std::vector<int64_t>> roots(ops.size());
    std::vector<Finding> findings;
    for (const OpRecord& op : ops) {
        auto& op_roots = roots[op.seq];
        op_roots.assign(op.outputs.size(), -1);
        int first_narrow = -1;
        int64_t inherited = -1;
        for (size_t i = 0; i < op.inputs.size(); ++i) {
            const TensorInfo& in = op.inputs[i];
            if (first_narrow < 0 && narrow(in.dtype)) first_narrow = static_cast<int>(i);
            if (inherited >= 0 || !wide(in.dtype) || in.producer < 0) continue;
            const auto& upstream = roots[in.producer];
            if (in.producer_output < static_cast<int>(upstream.size()))
                inherited = upstream[in.producer_output];
        }
        for (size_t slot = 0; slot < op.outputs.size(); ++slot) {
            if (!wide(op.outputs[slot].dtype)) continue;
            if (inherited >= 0) {
                op_roots[slot] = inherited;
            } else if (op.depth == 0 && first_narrow >= 0) {
                op_roots[slot] = op.seq;
                if (findings.empty() || findings.back().seq != op.seq)
                    findings.push_back(promotion(trace, op, first_narrow, static_cast<int>(slot)));
            }
        }
    }
    return findings;
}

std::vector<Finding> find_demotions(const Trace& trace, const std::set<std::string>& state_labels) {
    const auto& ops = trace.ops();
    const auto is_state = [&](const TensorInfo& t) {
        const std::string& label = label_for(trace, t);
        return !label.empty() &&
               (role_for(trace, t) == Role::state || state_labels.count(label) > 0);
    };
    std::vector<Finding> findings;
    for (const OpRecord& cast : ops) {
        if (cast.depth != 0 || !is_cast(cast) || cast.outputs.empty()) continue;
        const int source = main_input(cast);
        if (source < 0) continue;
        const TensorInfo& from = cast.inputs[source];
        const TensorInfo& to = cast.outputs[0];
        if (!is_float(from.dtype) || !is_float(to.dtype) || width(to.dtype) >= width(from.dtype) ||
            !is_state(from))
            continue;

        // (seq, output) of every record of the narrowed value
        std::set<std::pair<int64_t, int>> narrowed{{cast.seq, 0}};
        for (size_t s = static_cast<size_t>(cast.seq) + 1; s < ops.size(); ++s) {
            const OpRecord& op = ops[s];
            if (op.depth != 0) continue;
            std::vector<int> hits;
            for (size_t i = 0; i < op.inputs.size(); ++i) {
                const TensorInfo& in = op.inputs[i];
                if (in.producer >= 0 && narrowed.count({in.producer, in.producer_output}) > 0)
                    hits.push_back(static_cast<int>(i));
            }
            if (hits.empty()) continue;
            if (accumulates_into(op, hits)) {
                Finding f;
                f.kind = "DEMOTION";
                f.tensor = label_for(trace, from);
                f.seq = cast.seq;
                f.message = f.tensor + ": " + dtype_str(from.dtype) + " -> " + dtype_str(to.dtype) +
                            " at " + cast.op + " (#" + std::to_string(cast.seq) +
                            "), then accumulated into at " + op.op + " (#" +
                            std::to_string(op.seq) + ")";
                f.history = contains(hits, main_input(op)) && !op.outputs.empty()
                                ? history_of_seq(trace, op.seq, 0)
                                : history_of_seq(trace, cast.seq, 0);
                findings.push_back(std::move(f));
                break;
            }
            const std::string_view name = base_name(op.op);
            const bool main_hit = contains(hits, main_input(op));
            for (size_t slot = 0; slot < op.outputs.size(); ++slot) {
                const TensorInfo& out = op.outputs[slot];
                const int alias = out.inplace_of >= 0 ? out.inplace_of : out.view_of;
                const bool aliased = alias >= 0 && contains(hits, alias);
                const bool overwritten =
                    aliased && out.inplace_of >= 0 && one_of(name, kOverwrites);
                const bool carried = main_hit && one_of(name, kCarriesValue) &&
                                     out.shape == op.inputs[main_input(op)].shape;
                if (!overwritten && (aliased || carried))
                    narrowed.insert({op.seq, static_cast<int>(slot)});
            }
        }
    }
    return findings;
}

std::vector<int64_t> ops_outside_dtype(const Trace& trace, c10::ScalarType only) {
    std::vector<int64_t> out;
    const auto foreign = [&](const TensorInfo& t) { return is_float(t.dtype) && t.dtype != only; };
    for (const OpRecord& op : trace.ops()) {
        if (std::any_of(op.inputs.begin(), op.inputs.end(), foreign) ||
            std::any_of(op.outputs.begin(), op.outputs.end(), foreign))
            out.push_back(op.seq);
    }
    return out;
}

std::vector<TraceRow> trace_table(const Trace& trace) {
    std::vector<TraceRow> rows;
    rows.reserve(trace.ops().size());
    for (const OpRecord& op : trace.ops()) {
        TraceRow& row = rows.emplace_back();
        row.seq = op.seq;
        row.op = op.op;
        row.site = op.site;
        row.depth = op.depth;
        row.autocast = op.autocast ? 1 : 0;
        for (const TensorInfo& in : op.inputs) {
            if (!row.inputs.empty()) row.inputs += "; ";
            row.inputs += describe(in);
            if (in.producer >= 0) row.inputs += " <- #" + std::to_string(in.producer);
            const std::string& label = label_for(trace, in);
            if (!label.empty()) row.inputs += " (" + label + ")";
        }
        for (const TensorInfo& out : op.outputs) {
            if (!row.outputs.empty()) row.outputs += "; ";
            row.outputs += describe(out);
            if (out.inplace_of >= 0) {
                row.outputs += " in-place";
            } else if (out.view_of >= 0) {
                row.outputs += " view";
            }
            if (!out.label.empty()) row.outputs += " (" + out.label + ")";
        }
    }
    return rows;
}

std::vector<Finding> find_nonfinite_origin(const Trace& trace) {
    const auto bad = [](const TensorInfo& t) { return t.has_nan || t.has_inf; };
    for (const OpRecord& op : trace.ops()) {
        if (op.depth != 0) continue;
        const auto out = std::find_if(op.outputs.begin(), op.outputs.end(), bad);
        if (out == op.outputs.end()) continue;
        const int output = static_cast<int>(out - op.outputs.begin());
        const std::string name = tensor_name(trace, *out);
        const std::string values = out->has_nan && out->has_inf ? "NaN and Inf"
                                   : out->has_nan               ? "NaN"
                                                                : "Inf";
        std::string operands;
        for (const TensorInfo& in : op.inputs)
            operands +=
                (operands.empty() ? "" : ", ") + tensor_name(trace, in) + ": " + describe(in);
        const auto entered = std::find_if(op.inputs.begin(), op.inputs.end(), bad);
        Finding f;
        f.tensor = name;
        f.seq = op.seq;
        f.history = history_of_seq(trace, op.seq, output);
        if (entered != op.inputs.end()) {
            f.kind = "NONFINITE";
            f.message = tensor_name(trace, *entered) +
                        " holds NaN/Inf before any traced op made "
                        "it: it entered the prologue so, and " +
                        op.op + " passed it on";
        } else if (out->has_inf && (out->dtype == at::kHalf || out->dtype == at::kBFloat16)) {
            f.kind = "OVERFLOW";
            f.message = op.op + "(" + operands + ") -> " + describe(*out) + " made " + values +
                        " from finite inputs: the result exceeds " + dtype_str(out->dtype) +
                        "'s range (largest finite " +
                        (out->dtype == at::kHalf ? "65504" : "3.39e38") + ")";
        } else {
            f.kind = "NONFINITE";
            f.message = op.op + "(" + operands + ") -> " + describe(*out) + " made " + values +
                        " from finite inputs";
        }
        return {f};
    }
    return {};
}

}  // namespace lav::trace
