# tests/bench/profile_op_test.py — bench/profile_op.py's refusals, without a GPU.
"""Runs bench/profile_op.py where it must stop before it touches a GPU: an op lav does not list,
and a listed op without the CUDA ops library. Each refusal names what to do instead.

Usage: profile_op_test.py [LAV] [unittest arguments]; LAV, a path, is the lav executable whose
`lav list --format json` names the ops (default build/src/lav; skipped without one). Needs torch."""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "profile_op.py")
LAV = os.path.join(ROOT, "build", "src", "lav")


class Refusals(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(LAV):
            self.skipTest(f"no lav at {LAV}")

    def profile(self, op: str) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as tmp:
            return subprocess.run(
                [sys.executable, SCRIPT, op, "B1_T64_H1_D64", "--lav", LAV, "--lib",
                 os.path.join(tmp, "liblav_ops.so")],
                capture_output=True, text=True, timeout=300)

    def test_an_op_lav_does_not_list_is_refused_with_the_ones_it_does(self):
        r = self.profile("chunk_no_such_family")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("chunk_no_such_family is not one of lav's CUDA ops here", r.stderr)
        self.assertIn("chunk_delta_rule", r.stderr)

    def test_a_missing_ops_library_is_refused_with_how_to_build_it(self):
        r = self.profile("chunk_delta_rule")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("liblav_ops.so not found; build with -DLAV_ENABLE_CUDA=ON", r.stderr)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        LAV = os.path.abspath(sys.argv.pop(1))
    unittest.main()
