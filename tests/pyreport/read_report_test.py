# tests/pyreport/read_report_test.py — lav.report.read_report against h5py's view of a real run.
"""Usage: read_report_test.py REPORT.h5 INTERMEDIATES_DIR (written by `lav run` on
tests/pyreport/scenarios). Checks each DataFrame against the file as h5py reads it, that no
string stays bytes, and that a report marked incomplete, with fewer cases or none, reads too."""

import os
import shutil
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from lav.report import read_report  # noqa: E402

REPORT, INTERMEDIATES = sys.argv[1:3]
VARLEN = "pyreport_matrix[dtypes.inputs=bf16,dtypes.state=bf16,layout=head_last]"


def raw_cases(path):
    """{case id: its rows of each table, and its drift curves, as numpy}, read without lav: a
    case's rows are those whose `case` is its index, or for trace and contract, the index its
    `trace_case` and `contract_case` name."""
    with h5py.File(path, "r") as file:
        cases = file["cases"][()]
        tables = {name: file[name][()] for name in ("metrics", "findings", "contract", "trace")}
        drift = file["drift"][()]
    raw = {}
    for index, case in enumerate(cases):
        owner = {"trace": case["trace_case"], "contract": case["contract_case"]}
        rows = {name: table[table["case"] == owner.get(name, index)]
                for name, table in tables.items()}
        mine = drift[drift["case"] == index]
        curves = {}
        for row in mine:
            values, block = curves.setdefault(row["tensor"].decode(), ([], int(row["block"])))
            values.append(row["rel_rmse"])
        rows["drift"] = {t: (np.array(v), block) for t, (v, block) in curves.items()}
        raw[case["id"].decode()] = rows
    return raw


def truncated_copy(folder, keep):
    """A copy of REPORT as a killed run leaves it: its first `keep` cases, marked incomplete."""
    path = os.path.join(folder, f"incomplete_{keep}.h5")
    shutil.copy(REPORT, path)
    with h5py.File(path, "r+") as file:
        # every table is chunked with no limit on its rows, so it can shrink in place
        for name in ("summary", "cases"):
            file[name].resize((keep,))
        for name in ("metrics", "findings", "contract", "trace", "drift"):
            rows = int(np.count_nonzero(file[name]["case"] < keep))
            file[name].resize((rows,))
        file.attrs["case_count"] = np.int32(keep)
        file.attrs["complete"] = np.int32(0)
    return path


class ReadReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.report = read_report(REPORT, INTERMEDIATES)
        cls.raw = raw_cases(REPORT)

    def frames(self):
        names = ("summary", "cases", "metrics", "findings", "trace", "contract", "drift",
                 "chunks")
        return {name: getattr(self.report, name) for name in names}

    def test_no_string_stays_bytes(self):
        for name, frame in self.frames().items():
            for column in frame.columns[frame.dtypes == object]:
                kinds = {type(v) for v in frame[column]}
                self.assertEqual(kinds, {str}, f"{name}.{column}")
        for name, value in self.report.attrs.items():
            self.assertNotIsInstance(value, (bytes, np.generic), name)

    def test_run_attributes(self):
        attrs = self.report.attrs
        self.assertTrue(self.report.complete)
        self.assertEqual(attrs["case_count"], len(self.raw))
        self.assertIn("tests/pyreport/scenarios", attrs["command_line"])

    def test_summary_and_cases_in_case_order(self):
        ids = list(self.raw)
        self.assertEqual(list(self.report.summary["id"]), ids)
        self.assertEqual(list(self.report.cases["id"]), ids)
        self.assertEqual(self.report.cases.columns[0], "id")
        varlen = self.report.cases.set_index("id").loc[f"{VARLEN}/chunk/cpu/fwd"]
        self.assertEqual(varlen["cu_seqlens"], "[0, 50, 160, 192]")
        self.assertEqual(varlen["state_dtype"], "bf16")

    def test_tables_keyed_by_case(self):
        for name in ("metrics", "findings", "contract", "trace"):
            frame = getattr(self.report, name)
            self.assertEqual(frame.columns[0], "case", name)
            for case_id, raw in self.raw.items():
                rows = frame[frame["case"] == case_id]
                self.assertEqual(len(rows), len(raw[name]), f"{name} of {case_id}")
        metrics = self.report.metrics.set_index(["case", "tensor"])
        for case_id, raw in self.raw.items():
            for row in raw["metrics"]:
                self.assertEqual(metrics.loc[(case_id, row["tensor"].decode()), "rel_rmse"],
                                 row["rel_rmse"])

    def test_findings_carry_dtype_histories(self):
        findings = self.report.findings
        promotions = findings[findings["kind"] == "PROMOTION"]
        self.assertEqual(sorted(promotions["tensor"]), ["k", "q"])
        for history in promotions["history"]:
            self.assertIn("—aten::mul(scale_mul: fp32)→ fp32", history)
        self.assertTrue(set(self.report.trace["source"]) >= {"traced", "declared"})

    def test_drift_along_the_sequence(self):
        case_id = f"{VARLEN}/recurrent/cpu/bwd"
        drift = self.report.drift[self.report.drift["case"] == case_id]
        for tensor, (values, block) in self.raw[case_id]["drift"].items():
            curve = drift[drift["tensor"] == tensor]
            self.assertEqual(block, 32)
            np.testing.assert_array_equal(curve["rel_rmse"], values)
            np.testing.assert_array_equal(curve["position"], np.arange(len(values)) * 32)
            self.assertTrue((curve["block"] == 32).all())
        self.assertGreater(len(drift), 0)

    def test_chunk_states_along_the_packed_sequence(self):
        chunks = self.report.chunks
        self.assertEqual(set(chunks["variant"]), {"chunk"})
        # every chunk record (fwd and bwd), none of the recurrent ones
        records = {c for c in self.raw if "/chunk/" in c}
        self.assertEqual(set(chunks["case"]), records)
        one = chunks[chunks["case"] == f"{VARLEN}/chunk/cpu/fwd"]
        # sequences [0, 50) [50, 160) [160, 192) cut into chunks of 32 from their starts
        self.assertEqual(list(one["position"]), [0, 32, 50, 82, 114, 146, 160])
        self.assertEqual(set(one["state_dtype"]), {"bf16"})
        self.assertEqual(one["rel_rmse"].iloc[0], 0.0)  # zero initial state, exact in bf16
        self.assertGreater(one["rel_rmse"].iloc[1], 1e-4)  # a bf16 state is rounded

    def test_a_report_marked_incomplete(self):
        with tempfile.TemporaryDirectory() as folder:
            partial = read_report(truncated_copy(folder, 5))
            self.assertFalse(partial.complete)
            self.assertEqual(list(partial.summary["id"]), list(self.raw)[:5])
            self.assertEqual(set(partial.metrics["case"]), set(list(self.raw)[:5]))
            empty = read_report(truncated_copy(folder, 0))
            self.assertFalse(empty.complete)
            self.assertEqual(len(empty.summary), 0)
            for name in ("metrics", "findings", "trace", "contract", "drift"):
                frame = getattr(empty, name)
                self.assertEqual(len(frame), 0, name)
                self.assertEqual(frame.columns[0], "case", name)
            self.assertIn("rel_rmse", empty.metrics.columns)
            self.assertIn("position", empty.drift.columns)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
