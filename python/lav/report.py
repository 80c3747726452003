"""lav.report — a lav HDF5 report (reports/SCHEMA.md) as pandas DataFrames, strings decoded."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import h5py
import numpy as np
import pandas as pd

SCHEMA_VERSION = 1


class ReportError(Exception):
    """A file that is not a report of the schema version this reader reads."""


# the columns of a table that no case has rows in, so that an empty frame still has the
# columns a reader selects
_COLUMNS = {
    "metrics": ["tensor", "dtype", "expected_dtype", "rel_rmse", "max_abs", "max_abs_index",
                "max_rel", "nonfinite", "bound", "pass"],
    "contract": ["item", "dtype", "note"],
    "findings": ["kind", "tensor", "message", "history"],
    "trace": ["seq", "op", "depth", "autocast", "inputs", "outputs", "source", "kernel"],
    "drift": ["tensor", "block", "position", "rel_rmse"],
}
_TABLES = ("metrics", "contract", "findings", "trace")  # a compound dataset each
_CHUNK_COLUMNS = ["variant", "state_dtype", "chunk_size", "chunk", "sequence", "position",
                  "rel_rmse"]


@dataclass
class Report:
    """One run. Every per-case table has a `case` column first: the case id of `summary.id`."""

    path: str
    attrs: dict  # root attributes: lav_version, device, complete, command_line, ...
    summary: pd.DataFrame  # one row per case, in case order
    cases: pd.DataFrame  # each case's attributes (message, cu_seqlens, seed, kernel, ...)
    metrics: pd.DataFrame  # one row per measured tensor
    findings: pd.DataFrame  # one row per finding, `history` the dtype history where it has one
    trace: pd.DataFrame  # traced prologue ops and declared kernel items
    contract: pd.DataFrame  # the precision contract of each case's kernel
    drift: pd.DataFrame  # rel_rmse per block along the sequence: tensor, block, position
    chunks: pd.DataFrame = field(default_factory=lambda: _empty(_CHUNK_COLUMNS))

    @property
    def complete(self) -> bool:
        """False for the report of a run that is still going or was killed."""
        return bool(self.attrs.get("complete", 0))


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"case": pd.Series(dtype=object),
                         **{c: pd.Series(dtype=object) for c in columns}})


def _decoded(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def table(dataset: h5py.Dataset) -> pd.DataFrame:
    """A compound dataset as a DataFrame, its string columns decoded to str."""
    frame = pd.DataFrame(dataset[()])
    for column in frame.columns[frame.dtypes == object]:
        frame[column] = frame[column].map(_decoded)
    return frame


def _attributes(obj) -> dict:
    return {name: value.item() if isinstance(value, np.generic) else _decoded(value)
            for name, value in obj.attrs.items()}


def _keyed(frames: list[pd.DataFrame], name: str) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return _empty(_COLUMNS[name])
    return pd.concat(frames, ignore_index=True)


def _drift(case_id: str, group: h5py.Group) -> pd.DataFrame:
    frames = []
    for tensor, curve in group.items():
        values = curve[()]
        block = int(curve.attrs["block"])
        frames.append(pd.DataFrame({"case": case_id, "tensor": tensor, "block": block,
                                    "position": np.arange(len(values)) * block,
                                    "rel_rmse": values}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_report(path: str | os.PathLike, intermediates: str | os.PathLike | None = None) -> Report:
    """Reads a report; also `chunks` from `lav run --dump-intermediates DIR` when given DIR."""
    path = os.fspath(path)
    with h5py.File(path, "r") as file:
        attrs = _attributes(file)
        if attrs.get("schema_version") != SCHEMA_VERSION:
            raise ReportError(f"{path}: schema version {attrs.get('schema_version')}, "
                             f"this reader reads {SCHEMA_VERSION}")
        summary = table(file["summary"])
        cases, tables = [], {name: [] for name in _COLUMNS}
        # groups are named by index, so the summary's order is the groups' order
        for index in range(len(summary)):
            group = file["cases"][f"{index:04d}"]
            case = _attributes(group)
            cases.append(case)
            for name in _TABLES:
                frame = table(group[name])
                frame.insert(0, "case", case["id"])
                tables[name].append(frame)
            tables["drift"].append(_drift(case["id"], group["drift"]))
    columns = ["id", *sorted(set(cases[0]) - {"id"})] if cases else ["id"]
    report = Report(path=path, attrs=attrs, summary=summary,
                    cases=pd.DataFrame(cases, columns=columns),
                    **{name: _keyed(frames, name) for name, frames in tables.items()})
    if intermediates is not None:
        report.chunks = read_intermediates(intermediates, report.cases)
    return report


def read_intermediates(folder: str | os.PathLike, cases: pd.DataFrame) -> pd.DataFrame:
    """The per-chunk state errors of `DIR/<case>.h5`, one row per chunk of each of `cases`
    (a report's) whose variant stored them (a dump names the case, a record of it adds
    variant, backend and pass to its id); `position` counts along the packed sequence axis."""
    frames = []
    by_case = {}
    for row in cases.itertuples():
        by_case.setdefault(row.id.rsplit("/", 3)[0], []).append(row)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".h5"):
            continue
        with h5py.File(os.path.join(folder, name), "r") as file:
            if "intermediates_version" not in file.attrs:
                continue
            case_id = _decoded(file.attrs["case_id"])
            for variant, group in file.items():
                chunks = table(group["chunks"])
                for record in by_case.get(case_id, []):
                    if record.variant != variant:
                        continue
                    frames.append(_chunk_rows(record.id, variant, group, chunks,
                                              sequence_starts(record.cu_seqlens)))
    return pd.concat(frames, ignore_index=True) if frames else _empty(_CHUNK_COLUMNS)


def _chunk_rows(case_id, variant, group, chunks, offsets) -> pd.DataFrame:
    frame = chunks.copy()
    if offsets is not None:
        frame["position"] = frame["position"] + frame["sequence"].map(lambda s: offsets[s])
    frame.insert(0, "case", case_id)
    frame.insert(1, "variant", variant)
    frame.insert(2, "state_dtype", _decoded(group["h"].attrs["dtype"]))
    frame.insert(3, "chunk_size", int(group.attrs["chunk_size"]))
    return frame


def sequence_starts(cu_seqlens: str) -> list[int] | None:
    """`[0, 100, 1024]` → [0, 100, 1024]; None for a case that is not varlen (`""`)."""
    numbers = re.findall(r"-?\d+", cu_seqlens or "")
    return [int(n) for n in numbers] or None
