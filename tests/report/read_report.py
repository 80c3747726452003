#!/usr/bin/env python3
"""tests/report/read_report.py — reads a lav report with h5py and pandas alone, as SCHEMA.md says.

Usage: read_report.py REPORT.h5

Checks every root attribute and every table (/summary, /cases, /metrics, /contract, /findings,
/trace, /drift, read into pandas DataFrames), with the types reports/SCHEMA.md documents, and that
the rows of each case are found as it says: by the `case` column, in case order. Prints each problem and exits 1 if there is any; exits 77 (skipped, for CTest) when
h5py or pandas is not installed.
"""
import sys

try:
    import h5py
    import numpy as np
    import pandas as pd
except ImportError as missing:
    print(f"skipped: {missing}")
    sys.exit(77)

SCHEMA_VERSION = 2

# kinds: "str" vlen UTF-8 string, "f64", "i64", "u64", "int" (any integer), "flag" (1-byte 0/1)
ROOT_ATTRIBUTES = {
    "schema_version": "int", "complete": "int", "lav_version": "str", "git_commit": "str",
    "torch_version": "str", "hdf5_version": "str", "device": "str", "command_line": "str",
    "started_at": "str", "seed": "u64", "case_count": "int", "providers": "str",
}
SUMMARY_COLUMNS = {
    "id": "str", "scenario": "str", "family": "str", "variant": "str", "backend": "str",
    "pass": "str", "input_dtype": "str", "state_dtype": "str", "layout": "str", "shape": "str",
    "verdict": "str", "worst_tensor": "str", "worst_rel_rmse": "f64", "worst_bound": "f64",
    "seconds": "f64", "reference_seconds": "f64", "kernel_seconds": "f64", "jit_seconds": "f64",
}
CASES_COLUMNS = {
    **{name: "str" for name in (
        "id", "scenario_file", "scenario", "family", "variant", "backend", "pass", "input_dtype",
        "gate_dtype", "state_dtype", "output_dtype", "layout", "shape", "cu_seqlens", "verdict",
        "message", "kernel")},
    "seed": "u64", "seconds": "f64", "reference_seconds": "f64", "kernel_seconds": "f64",
    "jit_seconds": "f64", "trace_case": "i64", "contract_case": "i64",
}
METRICS_COLUMNS = {
    "tensor": "str", "dtype": "str", "expected_dtype": "str", "rel_rmse": "f64", "max_abs": "f64",
    "max_abs_index": "str", "max_rel": "f64", "nonfinite": "i64", "bound": "f64", "pass": "flag",
}
CONTRACT_COLUMNS = {"item": "str", "dtype": "str", "note": "str"}
FINDINGS_COLUMNS = {"kind": "str", "tensor": "str", "message": "str", "history": "str"}
TRACE_COLUMNS = {"seq": "int", "op": "str", "depth": "int", "autocast": "flag", "inputs": "str",
                 "outputs": "str", "source": "str", "kernel": "str"}
DRIFT_COLUMNS = {"tensor": "str", "block": "i64", "position": "i64", "rel_rmse": "f64"}
VERDICTS = {"pass", "warn", "fail", "error"}
DTYPES = {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"}

problems = []


def problem(text):
    problems.append(text)


def dtype_is(dtype, kind):
    """Whether a numpy dtype (of an attribute or a compound field) is of a documented kind."""
    if kind == "str":
        info = h5py.check_string_dtype(dtype)
        return info is not None and info.encoding == "utf-8" and info.length is None
    if kind == "f64":
        return dtype.kind == "f" and dtype.itemsize == 8
    if kind == "i64":
        return dtype.kind == "i" and dtype.itemsize == 8
    if kind == "u64":
        return dtype.kind == "u" and dtype.itemsize == 8
    if kind == "flag":
        return dtype.kind in "iu" and dtype.itemsize == 1
    return dtype.kind in "iu"


def check_attributes(obj, expected):
    """Checks each attribute of `obj` exists with its kind; returns their values."""
    values = {}
    for name, kind in expected.items():
        if name not in obj.attrs:
            problem(f"{obj.name}: no attribute '{name}'")
            continue
        if not dtype_is(obj.attrs.get_id(name).dtype, kind):
            problem(f"{obj.name}: attribute '{name}' is {obj.attrs.get_id(name).dtype}, not {kind}")
        values[name] = obj.attrs[name]
    return values


def read_table(group, name, columns):
    """Reads compound dataset `name` into a DataFrame with its strings decoded; None if absent."""
    if name not in group:
        problem(f"{group.name}: no dataset '{name}'")
        return None
    dataset = group[name]
    fields = dataset.dtype.fields or {}
    for column, kind in columns.items():
        if column not in fields:
            problem(f"{dataset.name}: no column '{column}'")
        elif not dtype_is(fields[column][0], kind):
            problem(f"{dataset.name}: column '{column}' is {fields[column][0]}, not {kind}")
    if dataset.ndim != 1:
        problem(f"{dataset.name}: {dataset.ndim}-D, not 1-D")
        return None
    frame = pd.DataFrame(dataset[()], columns=list(fields))
    # h5py returns the vlen strings of compound fields as bytes
    for column, kind in columns.items():
        if kind == "str" and column in frame and len(frame):
            frame[column] = frame[column].str.decode("utf-8")
    return frame


def check_keyed(frame, name, case_count):
    """A table keyed by case: `case` an index of /cases, never decreasing."""
    if frame is None or not len(frame):
        return
    index = frame["case"].to_numpy()
    if (index < 0).any() or (index >= case_count).any():
        problem(f"/{name}: case outside 0..{case_count - 1}")
    if (np.diff(index) < 0).any():
        problem(f"/{name}: rows not in case order")


def check_cases(cases, summary, tables):
    count = len(cases)
    for column in ("id", "scenario", "family", "variant", "backend", "pass", "verdict"):
        if summary is not None and list(summary[column]) != list(cases[column]):
            problem(f"/summary: column {column} says other than /cases")
    if not cases["verdict"].isin(VERDICTS).all():
        problem(f"/cases: verdicts {sorted(set(cases['verdict']) - VERDICTS)} unknown")
    for name in ("trace", "contract"):
        shared = cases[f"{name}_case"].to_numpy()
        if count and ((shared < 0).any() or (shared > np.arange(count)).any()):
            problem(f"/cases: {name}_case names no earlier case")
        owners = set(tables[name]["case"]) if tables[name] is not None else set()
        if not owners <= set(shared):
            problem(f"/{name}: rows of a case no case shares")

    metrics = tables["metrics"]
    if metrics is not None and len(metrics) and not metrics["pass"].isin([0, 1]).all():
        problem("/metrics: pass holds values other than 0 and 1")
    contract = tables["contract"]
    if contract is not None and len(contract):
        unknown = set(contract["dtype"]) - DTYPES
        if unknown:
            problem(f"/contract: unknown dtypes {sorted(unknown)}")
    trace = tables["trace"]
    if trace is not None and len(trace):
        if not trace["source"].isin(["traced", "declared"]).all():
            problem("/trace: source holds values other than traced and declared")
        declared = trace[trace["source"] == "declared"]
        unknown = set(declared["outputs"]) - DTYPES
        if unknown:
            problem(f"/trace: declared rows of unknown dtypes {sorted(unknown)}")
        if (declared["kernel"] == "").any():
            problem("/trace: a declared row names no kernel")
    drift = tables["drift"]
    if drift is not None and len(drift):
        if (drift["rel_rmse"] < 0).any():
            problem("/drift: negative rel_rmse")
        # position counts blocks from 0 along each curve: a case's rows of one tensor
        for (_, _), curve in drift.groupby(["case", "tensor"], sort=False):
            expected = np.arange(len(curve)) * curve["block"].to_numpy()
            if list(curve["position"]) != list(expected):
                problem(f"/drift: positions of {curve['tensor'].iloc[0]} are not 0, block, ...")


def main(path):
    with h5py.File(path, "r") as report:
        root = check_attributes(report, ROOT_ATTRIBUTES)
        if root.get("schema_version") != SCHEMA_VERSION:
            problem(f"/: schema_version {root.get('schema_version')}, expected {SCHEMA_VERSION}")
        if root.get("complete") not in (0, 1):
            problem(f"/: complete is {root.get('complete')}, not 0 or 1")

        summary = read_table(report, "summary", SUMMARY_COLUMNS)
        cases = read_table(report, "cases", CASES_COLUMNS)
        if cases is None:
            return
        case_count = root.get("case_count")
        if case_count != len(cases) or (summary is not None and len(summary) != case_count):
            problem(f"/: case_count {case_count}, /cases has {len(cases)} rows, /summary "
                    f"{None if summary is None else len(summary)}")
        columns = {"metrics": METRICS_COLUMNS, "contract": CONTRACT_COLUMNS,
                   "findings": FINDINGS_COLUMNS, "trace": TRACE_COLUMNS, "drift": DRIFT_COLUMNS}
        tables = {}
        for name, expected in columns.items():
            tables[name] = read_table(report, name, {"case": "i64", **expected})
            check_keyed(tables[name], name, len(cases))
        check_cases(cases, summary, tables)

        if summary is not None:
            print(summary[["id", "verdict", "worst_tensor", "worst_rel_rmse", "seconds"]]
                  .to_string(index=False))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
    for text in problems:
        print(f"{sys.argv[1]}: {text}", file=sys.stderr)
    sys.exit(1 if problems else 0)
