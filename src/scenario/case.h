// src/scenario/case.h — one fully resolved case: a scenario file after [matrix] expansion.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/source_location.h"
#include "scenario/prologue.h"

namespace lav::scenario {

/// How an input tensor is drawn (in fp64, before quantisation to the case's dtype).
///   randn:      scale · N(0, 1)
///   rand:       scale · U[0, 1)
///   logsigmoid: logsigmoid(N(0, 1)) / normalizer (gate logits; 0.1 decays strongly, 10 weakly)
///   zeros, ones: constant (ones times scale)
///   retention:  per-head log decay ln(1 − 2^(−5−h)) (for g_gamma)
struct Generator {
    std::string dist = "randn";
    double scale = 1.0;
    double normalizer = 1.0;
};

struct Case {
    // identity
    std::string file;  ///< scenario file as given on the command line
    std::string name;  ///< scenario name
    std::string description;
    /// the [matrix] values of this case in declaration order, e.g. {"dtypes.inputs", "bf16"}
    std::vector<std::pair<std::string, std::string>> matrix;
    std::string id;  ///< name plus matrix values: "smoke_gla[dtypes.inputs=bf16,layout=head_last]"

    // what runs
    std::string family;
    std::vector<std::string> variants;           ///< "chunk", "recurrent"
    bool forward = true;                         ///< passes contains "fwd"
    bool backward = false;                       ///< passes contains "bwd"
    std::map<std::string, std::string> options;  ///< family options, defaults filled in

    // shape and layout
    int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
    int64_t HV = 0;  ///< value heads for grouped value attention (GVA); equals H unless set
    Layout layout = Layout::head_last;
    std::vector<int64_t> cu_seqlens;  ///< empty unless varlen (then B == 1)
    int64_t chunk_size = 64;
    std::optional<double> scale;  ///< nullopt: K^-0.5
    bool initial_state = true;

    // precision policy
    DType input_dtype = DType::bf16;
    DType gate_dtype = DType::fp32;
    /// every state; with state_dtypes, the least precise of them (what default bounds use)
    DType state_dtype = DType::fp32;
    /// each state component's dtype (gsa: hk, hv) where [dtypes] state names components, every
    /// component of the family filled in; empty when one dtype holds all states
    std::map<std::string, DType> state_dtypes;
    DType output_dtype = DType::bf16;
    /// the backward's cotangents (d_o, dht, ...); nullopt: each in its tensor's dtype (o's, the
    /// state's)
    std::optional<DType> cotangent_dtype;

    // data and bounds
    uint64_t seed = 42;
    std::map<std::string, Generator> generators;  ///< by input tensor name; missing: family default
    std::map<std::string, double> tolerances;  ///< rel_rmse bound by tensor; missing: default table
    bool long_case = false;                    ///< skipped unless --long
    std::optional<Prologue> prologue;  ///< the ops that make the kernel inputs; nullopt: none
    /// `[inputs] from`: the kernel call's arguments to replay instead of drawn inputs; null: none
    std::shared_ptr<const struct Capture> capture;
    /// the caller hands the kernel its inputs (an op of liblav_ops.so): nothing is drawn
    bool inputs_given = false;

    SourceLocation location;  ///< the file itself (line 1), for errors found while running
};

}  // namespace lav::scenario
