"""lav.report — a lav HDF5 report (reports/SCHEMA.md) as pandas DataFrames, strings decoded."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import h5py
import numpy as np
import pandas as pd

SCHEMA_VERSION = 2


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
# /cases columns that say which case's rows of /trace and /contract a case shares
_SHARED = {"trace": "trace_case", "contract": "contract_case"}
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


def _keyed(frame: pd.DataFrame, name: str, ids: np.ndarray, cases: pd.DataFrame) -> pd.DataFrame:
    """A run-wide table with its `case` index replaced by the case id; the rows of /trace and
    /contract a case shares with an earlier one repeated under its own id, in case order."""
    if name in _SHARED:
        owners = cases[_SHARED[name]].to_numpy()
        # each case takes the rows of the case its column names
        by_owner = {owner: rows for owner, rows in frame.groupby("case", sort=False).groups.items()}
        order = [(index, by_owner[owner]) for index, owner in enumerate(owners)
                 if owner in by_owner]
        if order:
            frame = frame.loc[np.concatenate([rows for _, rows in order])].reset_index(drop=True)
            frame["case"] = np.repeat([index for index, _ in order],
                                      [len(rows) for _, rows in order])
        else:
            frame = frame.iloc[0:0]
    if not len(frame):
        return _empty(_COLUMNS[name])
    frame = frame.copy()
    frame["case"] = ids[frame["case"].to_numpy()]
    return frame.reset_index(drop=True)


def read_report(path: str | os.PathLike, intermediates: str | os.PathLike | None = None) -> Report:
    """Reads a report; also `chunks` from `lav run --dump-intermediates DIR` when given DIR."""
    path = os.fspath(path)
    with h5py.File(path, "r") as file:
        attrs = _attributes(file)
        if attrs.get("schema_version") != SCHEMA_VERSION:
            raise ReportError(f"{path}: schema version {attrs.get('schema_version')}, "
                             f"this reader reads {SCHEMA_VERSION}")
        summary = table(file["summary"])
        cases = table(file["cases"])
        tables = {name: table(file[name]) for name in _COLUMNS}
    ids = cases["id"].to_numpy(dtype=object)
    frames = {name: _keyed(frame, name, ids, cases) for name, frame in tables.items()}
    shown = cases.drop(columns=list(_SHARED.values()))
    columns = ["id", *sorted(set(shown.columns) - {"id"})]
    report = Report(path=path, attrs=attrs, summary=summary, cases=shown[columns], **frames)
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
