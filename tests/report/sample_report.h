// tests/report/sample_report.h — a three-case report (pass, fail, error) for the report tests.
#pragma once

#include <limits>

#include "report/report.h"

namespace lav::report::samples {

inline RunInfo sample_run() {
    RunInfo run;
    run.lav_version = "0.1.0";
    run.git_commit = "0123456789ab";
    run.torch_version = "2.11.0";
    run.hdf5_version = "1.10.8";
    run.device = "cpu (2 threads)";
    run.gpu = "NVIDIA H100 80GB HBM3";
    run.compute_capability = "9.0";
    run.cuda_driver = "580.159.04, CUDA 13.0";
    run.cuda_runtime = "13.0";
    run.command_line = "lav run scenarios/smoke --out smoke.h5";
    run.started_at = "2025-01-02T03:04:05Z";
    // above 2^63, so a signed or narrower type anywhere on the way would show
    run.seed = 0xFEDCBA9876543210ull;
    return run;
}

inline PrecisionContract bf16_chunk_contract() {
    return {"simple_gla.chunk_fwd",
            {{"inputs q, k, v", DType::bf16, "as given"},
             {"accumulator", DType::fp32, "tensor-core dot products"},
             {"chunk states h", DType::fp32, "read by every later chunk"},
             {"output o", DType::bf16, "rounded once, at the end"}}};
}

inline CaseRecord passing_case() {
    CaseRecord c;
    c.id = "smoke[dtypes.inputs=bf16]/chunk/cpu/fwd";
    c.scenario_file = "scenarios/smoke/simple_gla.toml";
    c.scenario = "smoke";
    c.family = "simple_gla";
    c.variant = "chunk";
    c.backend = "cpu";
    c.pass = "fwd";
    c.input_dtype = c.gate_dtype = "bf16";
    c.state_dtype = "fp32";
    c.output_dtype = "bf16";
    c.layout = "head_last";
    c.shape = "B2_T1024_H4_K64_V64";
    c.seed = 42;
    c.verdict = "pass";
    c.seconds = 0.42;
    c.reference_seconds = 0.25;
    c.kernel_seconds = 0.125;
    c.metrics = {{"o", "bf16", "bf16", 2.4e-3, 1.5e-2, "[0, 3, 1, 7]", 3.0e-2, 0, 5.0e-3, true},
                 {"ht", "fp32", "fp32", 1.6e-3, 2.0e-3, "[1, 2, 5, 9]", 1.0e-2, 0, 5.0e-3, true}};
    // "o" before "ht": the reader must keep this order, not the alphabetical one
    c.drift = {{"o", 64, {2.1e-3, 2.3e-3, 2.4e-3, 2.6e-3}}, {"ht", 1024, {1.6e-3}}};
    c.contract = bf16_chunk_contract();
    return c;
}

inline CaseRecord failing_case() {
    CaseRecord c = passing_case();
    c.id = "smoke[dtypes.inputs=bf16]/chunk/cpu/bwd";
    c.pass = "bwd";
    c.cu_seqlens = "[0, 100, 1024]";
    c.seed = 43;
    c.verdict = "fail";
    c.message = "rel_rmse of o and dq above their bounds";
    c.seconds = 1.25;
    c.reference_seconds = 0.5;
    c.kernel_seconds = 0.625;
    c.jit_seconds = 0.5;
    c.metrics = {{"o", "bf16", "bf16", 6.1e-3, 3.1e-2, "[1, 917, 2, 40]", 8.0e-2, 0, 5.0e-3, false},
                 {"dq", "fp32", "bf16", std::numeric_limits<double>::quiet_NaN(), 1.0,
                  "[0, 5, 0, 0]", std::numeric_limits<double>::infinity(), 3, 8.0e-3, false},
                 {"dk", "bf16", "bf16", 3.5e-3, 1.0e-2, "[0, 1, 1, 1]", 2.0e-2, 0, 8.0e-3, true}};
    c.drift = {{"o", 64, {2.0e-3, 6.1e-3}}};
    c.findings = {
        {"TOLERANCE", "o", "rel_rmse 6.1e-03 above bound 5.0e-03", ""},
        {"NONFINITE", "dq", "3 NaN where the reference is finite — first at [0, 5, 0, 0] ✗", ""},
        {"OUTPUT_DTYPE_CONTRACT", "dq", "returned fp32, the contract says bf16 (Δ dtype)", ""},
        {"PROMOTION", "k", "k: fp16 -> fp32 at aten::addcmul, operand k_a: fp32 (parameter)",
         "k: fp16 —aten::addcmul(k_a: fp32)→ fp32"}};
    c.trace = {
        {0, "aten::mul", 0, false, "fp16[1,16,2,8] (k); fp16[1,16,2,8] <- #-1", "fp16[1,16,2,8]",
         "traced", ""},
        {1, "aten::addcmul", 0, true, "fp16[1,16,2,8] (k); fp32[8] (k_a)", "fp32[1,16,2,8]",
         "traced", ""},
        {-1, "chunk states h", 0, false, "", "fp32", "declared", "simple_gla/chunk/cpu/bwd"}};
    return c;
}

inline CaseRecord error_case() {
    CaseRecord c;
    c.id = "seeds/fp16_ü[shape.T=8192]/recurrent/cpu/fwd";
    c.scenario_file = "scenarios/seeds/fp16_ü.toml";
    c.scenario = "fp16_ü";
    c.family = "simple_gla";
    c.variant = "recurrent";
    c.backend = "cpu";
    c.pass = "fwd";
    c.input_dtype = c.gate_dtype = c.output_dtype = "fp16";
    c.state_dtype = "fp16";
    c.layout = "head_first";
    c.shape = "B1_T8192_H2_K64_V64";
    c.seed = 7;
    c.verdict = "error";
    c.message = "kernel refused the inputs: state dtype fp16 is not supported\nwanted fp32";
    c.seconds = 0.01;
    return c;
}

/// The three cases above; complete.
inline Report sample_report() {
    Report report;
    report.complete = true;
    report.run = sample_run();
    report.cases = {passing_case(), failing_case(), error_case()};
    return report;
}

}  // namespace lav::report::samples
