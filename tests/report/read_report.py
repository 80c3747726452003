#!/usr/bin/env python3
"""tests/report/read_report.py — reads a lav report with h5py and pandas alone, as SCHEMA.md says.

Usage: read_report.py REPORT.h5

Checks every root attribute, the /summary table (read into a pandas DataFrame), and each case's
attributes, metrics, contract, findings, trace and drift curves, with the types reports/SCHEMA.md
documents. Prints each problem and exits 1 if there is any; exits 77 (skipped, for CTest) when
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

SCHEMA_VERSION = 1

# kinds: "str" vlen UTF-8 string, "f64", "i64", "u64", "int" (any integer), "flag" (1-byte 0/1)
ROOT_ATTRIBUTES = {
    "schema_version": "int", "complete": "int", "lav_version": "str", "git_commit": "str",
    "torch_version": "str", "hdf5_version": "str", "device": "str", "command_line": "str",
    "started_at": "str", "seed": "u64", "case_count": "int",
}
SUMMARY_COLUMNS = {
    "id": "str", "scenario": "str", "family": "str", "variant": "str", "backend": "str",
    "pass": "str", "input_dtype": "str", "state_dtype": "str", "layout": "str", "shape": "str",
    "verdict": "str", "worst_tensor": "str", "worst_rel_rmse": "f64", "worst_bound": "f64",
    "seconds": "f64",
}
CASE_ATTRIBUTES = {
    **{name: "str" for name in (
        "id", "scenario_file", "scenario", "family", "variant", "backend", "pass", "input_dtype",
        "gate_dtype", "state_dtype", "output_dtype", "layout", "shape", "cu_seqlens", "verdict",
        "message", "kernel")},
    "seed": "u64", "seconds": "f64",
}
METRICS_COLUMNS = {
    "tensor": "str", "dtype": "str", "expected_dtype": "str", "rel_rmse": "f64", "max_abs": "f64",
    "max_abs_index": "str", "max_rel": "f64", "nonfinite": "i64", "bound": "f64", "pass": "flag",
}
CONTRACT_COLUMNS = {"item": "str", "dtype": "str", "note": "str"}
FINDINGS_COLUMNS = {"kind": "str", "tensor": "str", "message": "str", "history": "str"}
TRACE_COLUMNS = {"seq": "int", "op": "str", "depth": "int", "autocast": "flag", "inputs": "str",
                 "outputs": "str", "source": "str", "kernel": "str"}
VERDICTS = {"pass", "fail", "error"}
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


def check_case(name, group, summary_row):
    attributes = check_attributes(group, CASE_ATTRIBUTES)
    if attributes.get("verdict") not in VERDICTS:
        problem(f"{group.name}: verdict {attributes.get('verdict')!r} not one of {VERDICTS}")
    if summary_row is not None:
        for column in ("id", "scenario", "family", "variant", "backend", "pass", "verdict"):
            if column in attributes and summary_row[column] != attributes[column]:
                problem(f"/summary row {name}: {column} {summary_row[column]!r} but "
                        f"{group.name} has {attributes[column]!r}")

    metrics = read_table(group, "metrics", METRICS_COLUMNS)
    if metrics is not None and len(metrics) and not metrics["pass"].isin([0, 1]).all():
        problem(f"{group.name}/metrics: pass holds values other than 0 and 1")
    contract = read_table(group, "contract", CONTRACT_COLUMNS)
    if contract is not None and len(contract):
        unknown = set(contract["dtype"]) - DTYPES
        if unknown:
            problem(f"{group.name}/contract: unknown dtypes {sorted(unknown)}")
    read_table(group, "findings", FINDINGS_COLUMNS)
    trace = read_table(group, "trace", TRACE_COLUMNS)
    if trace is not None and len(trace):
        if not trace["source"].isin(["traced", "declared"]).all():
            problem(f"{group.name}/trace: source holds values other than traced and declared")
        declared = trace[trace["source"] == "declared"]
        unknown = set(declared["outputs"]) - DTYPES
        if unknown:
            problem(f"{group.name}/trace: declared rows of unknown dtypes {sorted(unknown)}")
        if (declared["kernel"] == "").any():
            problem(f"{group.name}/trace: a declared row names no kernel")

    if "drift" not in group or not isinstance(group["drift"], h5py.Group):
        problem(f"{group.name}: no group 'drift'")
        return
    for tensor, curve in group["drift"].items():
        is_curve = isinstance(curve, h5py.Dataset) and curve.ndim == 1
        if not is_curve or not dtype_is(curve.dtype, "f64"):
            problem(f"{curve.name}: not a 1-D float64 dataset")
            continue
        check_attributes(curve, {"block": "i64"})
        if np.any(curve[()] < 0):
            problem(f"{curve.name}: negative rel_rmse")


def main(path):
    with h5py.File(path, "r") as report:
        root = check_attributes(report, ROOT_ATTRIBUTES)
        if root.get("schema_version") != SCHEMA_VERSION:
            problem(f"/: schema_version {root.get('schema_version')}, expected {SCHEMA_VERSION}")
        if root.get("complete") not in (0, 1):
            problem(f"/: complete is {root.get('complete')}, not 0 or 1")

        summary = read_table(report, "summary", SUMMARY_COLUMNS)
        if "cases" not in report:
            problem("/: no group 'cases'")
            return
        names = sorted(report["cases"],
                       key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0))
        case_count = root.get("case_count")
        if names != [f"{i:04d}" for i in range(len(names))]:
            problem(f"/cases: groups {names} are not 0000, 0001, ...")
        if case_count != len(names) or (summary is not None and len(summary) != case_count):
            problem(f"/: case_count {case_count}, /cases has {len(names)} groups, /summary "
                    f"{None if summary is None else len(summary)} rows")
        for i, name in enumerate(names):
            row = summary.iloc[i] if summary is not None and i < len(summary) else None
            check_case(name, report["cases"][name], row)

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
