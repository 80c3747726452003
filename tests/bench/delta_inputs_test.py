# tests/bench/delta_inputs_test.py — the benchmark's delta rules on the CPU, without a GPU.
"""Checks bench/cuda_ops.py for delta_rule, gated_delta_rule and kda without a GPU: the chunked
fp64 references against token-by-token loops (values and gradients), the inputs, the arguments
lav's op and FLA's function are given, refused backward passes, and a --dry-run end to end.

Usage: delta_inputs_test.py [LAV] [unittest arguments]; LAV, a path, is the lav executable
whose `lav list --format json` the dry run reads (default build/src/lav; the dry run is skipped
without one). Needs torch."""

import ast
import glob
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cuda_ops  # noqa: E402

LAV = os.path.join(ROOT, "build", "src", "lav")
DELTA = ("delta_rule", "gated_delta_rule", "kda")
RECURRENT = ",".join("fused_recurrent_" + f for f in DELTA)
CHUNK_CUDA = ("delta_rule", "gated_delta_rule")  # the families with a CUDA chunk row


def setUpModule():
    try:
        cuda_ops._import_torch()
    except ImportError as e:
        raise unittest.SkipTest(f"no torch: {e}")


def decl(name, role, shape, when=""):
    return {"name": name, "role": role, "shape": shape, "when": when}


def listing() -> dict:
    """What `lav list --format json` of a CUDA build says of the three families (the parts
    lav_ops() reads): CUDA rows for the recurrent variant, and for the chunk variant of
    delta_rule and gated_delta_rule."""
    def family(name, gates, options):
        tensors = [decl("q", "input", "B T H K"), decl("k", "input", "B T H K"),
                   decl("v", "input", "B T HV V"), *gates,
                   decl("h0", "state", "N HV K V", "initial_state"),
                   decl("o", "output", "B T HV V"), decl("ht", "output", "N HV K V")]
        rows = [{"variant": "chunk", "device": "cpu"}, {"variant": "recurrent", "device": "cpu"},
                {"variant": "recurrent", "device": "cuda"}]
        if name in CHUNK_CUDA:
            rows.append({"variant": "chunk", "device": "cuda"})
        return {"name": name, "rows": rows, "tensors": tensors, "options": options}

    l2 = {"use_qk_l2norm_in_kernel": ["true", "false"]}
    gate = {"use_gate_in_kernel": ["false", "true"], **l2}
    in_kernel = [decl("A_log", "gate", "HV", "use_gate_in_kernel=true"),
                 decl("dt_bias", "gate", "HV", "use_gate_in_kernel=true")]
    return {"families": [
        family("delta_rule", [decl("beta", "gate", "B T HV")], l2),
        family("gated_delta_rule", [decl("g", "gate", "B T HV"), decl("beta", "gate", "B T HV"),
                                    *in_kernel], gate),
        family("kda", [decl("g", "gate", "B T HV K"), decl("beta", "gate", "B T HV"),
                       *in_kernel], gate),
    ]}


def fla_parameters(module: str, function: str) -> set | None:
    """The parameter names of FLA's function, read from the fla_core wheel's source (FLA
    imports Triton, which a CPU machine may lack); None without the wheel."""
    wheels = glob.glob(os.path.join(ROOT, ".devdeps", "wheels", "fla_core-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        package = module.replace(".", "/") + "/"
        for path in sorted(n for n in z.namelist() if n.startswith(package) and
                           "/" not in n[len(package):] and n.endswith(".py")):
            for node in ast.parse(z.read(path)).body:
                if isinstance(node, ast.FunctionDef) and node.name == function:
                    return {p.arg for p in node.args.args + node.args.kwonlyargs}
    raise AssertionError(f"{function} not found in {module} of {wheels[0]}")


class Reference(unittest.TestCase):
    def test_chunked_references_match_token_loops_with_gradients(self):
        results = cuda_ops.check_reference("cpu")
        for family in DELTA:
            self.assertTrue(results[family]["ok"], results[family])
            self.assertLess(results[family]["max_rel_rmse"], 1e-12)

    def test_the_reference_sees_the_gates(self):
        # the delta update and the gates must change the result: a reference that dropped
        # beta or g would still match a loop that dropped them too
        shape = cuda_ops.Shape("B1_T40_H2_D8", 1, 40, 2, 8)
        for family in DELTA:
            ins = {n: t.double() for n, t in
                   cuda_ops.make_inputs(family, shape, cuda_ops.torch.float64, "cpu").items()}
            o, _ = cuda_ops.run_reference(family, ins, cuda_ops.torch.float64)
            for name in [n for n in ("g", "beta") if n in ins]:
                other = dict(ins, **{name: ins[name] * 0.5})
                o2, _ = cuda_ops.run_reference(family, other, cuda_ops.torch.float64)
                self.assertGreater(cuda_ops.rel_rmse(o2, o), 1e-3, f"{family}: {name}")


class Inputs(unittest.TestCase):
    def test_shapes_norms_and_ranges(self):
        torch = cuda_ops.torch
        shape = cuda_ops.Shape("B2_T33_H3_D16", 2, 33, 3, 16)
        for family in DELTA:
            ins = cuda_ops.make_inputs(family, shape, torch.bfloat16, "cpu")
            want = ["q", "k", "v", "beta"] if family == "delta_rule" else ["q", "k", "v", "g",
                                                                          "beta"]
            self.assertEqual(list(ins), want)
            for n in ("q", "k"):
                norms = ins[n].float().norm(dim=-1)
                self.assertLess((norms - 1).abs().max().item(), 1e-2, f"{family} {n}")
            self.assertEqual(tuple(ins["beta"].shape), (2, 33, 3))
            self.assertTrue(((ins["beta"] > 0) & (ins["beta"] < 1)).all())
            if family != "delta_rule":
                g = ins["g"]
                self.assertEqual(tuple(g.shape), (2, 33, 3) + ((16,) if family == "kda" else ()))
                self.assertTrue((g <= 0).all())
            again = cuda_ops.make_inputs(family, shape, torch.bfloat16, "cpu")
            self.assertTrue(all(torch.equal(ins[n], again[n]) for n in ins))

    def test_the_kda_gate_is_clamped_at_minus_5(self):
        # 16.8M draws: randn reaches logsigmoid^-1(-5) ~ -5.007 (p = 2.7e-7) a few times
        shape = cuda_ops.Shape("B1_T8192_H16_D128", 1, 8192, 16, 128)
        g = cuda_ops.make_inputs("kda", shape, cuda_ops.torch.float32, "cpu")["g"]
        self.assertEqual(g.min().item(), -5)

    def test_slices_of_the_beta_and_gates_are_the_first_heads(self):
        shape = cuda_ops.Shape("B1_T5_H4_D8", 1, 5, 4, 8)
        ins = cuda_ops.make_inputs("kda", shape, cuda_ops.torch.float32, "cpu")
        self.assertEqual(tuple(cuda_ops.slice_heads("kda", "beta", ins["beta"], 2, 8).shape),
                         (1, 5, 2))
        self.assertEqual(tuple(cuda_ops.slice_heads("kda", "g", ins["g"], 2, 8).shape),
                         (1, 5, 2, 8))


class Peers(unittest.TestCase):
    def test_ops_are_the_cuda_rows_with_their_inputs_and_peers(self):
        ops, notes = cuda_ops.lav_ops(listing())
        self.assertEqual(sorted(ops), sorted(["fused_recurrent_" + f for f in DELTA] +
                                             ["chunk_" + f for f in CHUNK_CUDA]))
        self.assertEqual(notes, [])
        self.assertEqual(ops["fused_recurrent_delta_rule"].inputs, ("q", "k", "v", "beta"))
        self.assertEqual(ops["fused_recurrent_kda"].inputs, ("q", "k", "v", "g", "beta"))
        self.assertEqual(ops["fused_recurrent_kda"].fla_function, "fused_recurrent_kda")
        for f in CHUNK_CUDA:
            spec = ops["chunk_" + f]
            self.assertEqual((spec.variant, spec.fla_function), ("chunk", "chunk_" + f))
            self.assertEqual(spec.inputs, ops["fused_recurrent_" + f].inputs)
        chunk, _ = cuda_ops.lav_ops(listing(), "chunk")
        for f in DELTA:
            spec = chunk["fused_recurrent_" + f]
            self.assertEqual((spec.fla_module, spec.fla_function), ("fla.ops." + f, "chunk_" + f))
            self.assertEqual(spec.options, {"use_qk_l2norm_in_kernel": "false"})

    def test_both_sides_get_the_same_tensors_scale_and_options(self):
        torch = cuda_ops.torch
        shape = cuda_ops.Shape("B1_T6_H2_D8", 1, 6, 2, 8)
        for variant in ("same", "chunk"):
            ops, _ = cuda_ops.lav_ops(listing(), variant)
            for spec in ops.values():
                ins = cuda_ops.make_inputs(spec.family, shape, torch.float32, "cpu")
                ts = [ins[n] for n in spec.inputs]
                seen = {}

                def record(side):
                    def fn(**kw):
                        seen[side] = kw
                        return ins["v"], ins["v"].new_zeros(1, 2, 8, 8)
                    return fn

                fla = types.ModuleType(spec.fla_module)
                setattr(fla, spec.fla_function, record("FLA"))
                sys.modules[spec.fla_module] = fla
                lav = types.SimpleNamespace(**{spec.name: record("ours")})
                cuda_ops.torch = types.SimpleNamespace(ops=types.SimpleNamespace(lav=lav))
                try:
                    cuda_ops.lav_impl(spec, {"loaded": True}).call(*ts)
                    cuda_ops.fla_impl(spec, {"loaded": True}).call(*ts)
                finally:
                    cuda_ops.torch = torch
                    del sys.modules[spec.fla_module]
                ours, theirs = seen["ours"], seen["FLA"]
                for n in spec.inputs:
                    self.assertIs(ours[n], ins[n])
                    self.assertIs(theirs[n], ins[n])
                self.assertEqual(ours["scale"], 8 ** -0.5)
                self.assertEqual(theirs["scale"], 8 ** -0.5)
                self.assertEqual(ours["use_qk_l2norm_in_kernel"], "false")
                self.assertIs(theirs["use_qk_l2norm_in_kernel"], False)
                self.assertIs(theirs["output_final_state"], True)
                params = fla_parameters(spec.fla_module, spec.fla_function)
                if params is not None:
                    self.assertLessEqual(set(theirs), params, spec.fla_function)


class Refusals(unittest.TestCase):
    def run_impl(self, call) -> dict:
        torch = cuda_ops.torch
        spec = cuda_ops.lav_ops(listing())[0]["fused_recurrent_delta_rule"]
        shape = cuda_ops.Shape("B1_T6_H2_D8", 1, 6, 2, 8)
        ins = cuda_ops.make_inputs(spec.family, shape, torch.float32, "cpu")
        do = torch.randn_like(ins["v"])
        ref = cuda_ops.reference_for(spec, ins, do, 2, shape)
        args = types.SimpleNamespace(verbose=False, iters=2, warmup=0, graph_check=False,
                                     passes=cuda_ops.PASSES)
        rec = {}
        cuda_ops.run_impl(rec, cuda_ops.Impl("FLA", True, call=call), spec, ins, do, ref, 2,
                          shape, cuda_ops.Timer("cpu", False), {"fwd": 1, "fwd+bwd": 1}, None,
                          args, lambda: None)
        return rec

    def test_an_output_without_a_graph_is_a_refused_backward(self):
        def call(*ts):
            o, ht = cuda_ops.run_reference("delta_rule", dict(zip(["q", "k", "v", "beta"], ts)),
                                           cuda_ops.torch.float32)
            return o.detach(), ht.detach()

        rec = self.run_impl(call)
        self.assertIn("no backward", rec["passes"]["fwd+bwd"]["refused"])
        self.assertIn("median_ms", rec["passes"]["fwd"])
        self.assertLess(rec["errors"]["o"], 1e-5)
        self.assertNotIn("dq", rec["errors"])

    def test_a_backward_that_raises_is_refused_with_its_message(self):
        class NoBackward(cuda_ops.torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                raise NotImplementedError("Backward pass is not implemented")

        def call(*ts):
            o, ht = cuda_ops.run_reference("delta_rule", dict(zip(["q", "k", "v", "beta"], ts)),
                                           cuda_ops.torch.float32)
            return NoBackward.apply(o), ht

        rec = self.run_impl(call)
        self.assertIn("NotImplementedError: Backward pass is not implemented",
                      rec["passes"]["fwd+bwd"]["refused"])


class DryRun(unittest.TestCase):
    def dry_run(self, ops, *extra):
        """The JSON and Markdown of a CPU dry run over `ops` at B1_T40_H2_D8."""
        if not os.path.exists(LAV):
            self.skipTest(f"no lav executable at {LAV}")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "bench.json")
            md = os.path.join(tmp, "bench.md")
            proc = subprocess.run(
                [sys.executable, os.path.join(ROOT, "bench", "cuda_ops.py"), "--dry-run",
                 "--device", "cpu", "--lav", LAV, "--ops", ops, "--no-fla", "--dtype", "fp32",
                 "--fla-variant", "chunk", "--shapes", "B1_T40_H2_D8", "--out", out,
                 "--markdown", md, *extra], capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            with open(out) as f, open(md) as g:
                return json.load(f), g.read()

    def test_dry_run_writes_a_row_per_op(self):
        doc, table = self.dry_run(RECURRENT)
        self.assertEqual([c["op"] for c in doc["results"]], RECURRENT.split(","))
        for family in DELTA:
            self.assertTrue(doc["reference_self_check"][family]["ok"])
        for case in doc["results"]:
            family = case["op"].removeprefix("fused_recurrent_")
            self.assertEqual(case["fla_function"], f"fla.ops.{family}.chunk_{family}")
            self.assertIn(f"{case['op']}: fla.ops.{family}.chunk_{family}", table)
            self.assertNotIn("error", case)
            ours = case["impls"]["ours"]
            self.assertIn("stand_in", ours)
            grads = ["dq", "dk", "dv"] + (["dg"] if family != "delta_rule" else []) + ["dbeta"]
            self.assertEqual(list(ours["errors"]), ["o", "ht"] + grads)
            for name, err in ours["errors"].items():
                self.assertLess(err, 1e-5, f"{case['op']} {name}")  # fp32 stand-in vs fp64
            self.assertIn("--no-fla", case["impls"]["FLA"]["stand_in"])

    def test_passes_fwd_times_and_measures_the_forward_alone(self):
        doc, table = self.dry_run("fused_recurrent_delta_rule", "--passes", "fwd")
        case = doc["results"][0]
        self.assertEqual(case["passes"], ["fwd"])
        for label in ("ours", "FLA"):
            self.assertEqual(list(case["impls"][label]["passes"]), ["fwd"])
            self.assertIn("median_ms", case["impls"][label]["passes"]["fwd"])
        self.assertEqual(list(case["impls"]["ours"]["errors"]), ["o", "ht"])
        self.assertIn("| fwd |", table)
        self.assertNotIn("| fwd+bwd |", table)


class Table(unittest.TestCase):
    def test_the_worst_gradient_error_includes_dbeta_and_dg(self):
        errors = {"o": 1e-3, "ht": 1e-3, "dq": 1e-3, "dk": 1e-3, "dv": 1e-3, "dg": 2e-3,
                  "dbeta": 3e-3}
        impl = {"available": True, "passes": {"fwd+bwd": {"median_ms": 1.0}}, "errors": errors}
        case = {"op": "fused_recurrent_gated_delta_rule", "shape": "B1_T8_H2_D8", "dims": {},
                "inputs": ["q", "k", "v", "g", "beta"], "impls": {"ours": impl}}
        row = next(r for r in cuda_ops.table_rows([case], 0.01) if r[2] == "fwd+bwd")
        self.assertEqual(row[13], "3.00e-03 (dbeta) / -")


if __name__ == "__main__":
    if len(sys.argv) > 1 and os.sep in sys.argv[1]:
        LAV = sys.argv.pop(1)
    unittest.main()
