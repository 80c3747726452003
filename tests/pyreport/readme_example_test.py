# tests/pyreport/readme_example_test.py — runs README.md's pandas example on a fresh report.
"""Usage: readme_example_test.py REPORT.h5. Takes the README's Python block that calls
read_report, runs it where `reports/out/smoke.h5` is REPORT, and checks what it prints."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
REPORT = sys.argv[1]

with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as readme:
    blocks = re.findall(r"```python\n(.*?)```", readme.read(), re.S)
examples = [b for b in blocks if "read_report(" in b]
if len(examples) != 1:
    sys.exit(f"README.md has {len(examples)} Python blocks calling read_report, expected 1")

with tempfile.TemporaryDirectory() as folder:
    os.makedirs(os.path.join(folder, "reports", "out"))
    shutil.copy(REPORT, os.path.join(folder, "reports", "out", "smoke.h5"))
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    result = subprocess.run([sys.executable, "-c", examples[0]], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=60)
print(result.stdout, result.stderr, sep="\n")
if result.returncode != 0:
    sys.exit(f"the README example exited {result.returncode}")

with h5py.File(REPORT, "r") as file:
    device = file.attrs["device"]
first = result.stdout.splitlines()[:1]
if first != [f"{device} complete"]:
    sys.exit(f"the README example's first line is {first}, expected the device and 'complete'")
# the pivot table: a row per input dtype of the run
for dtype in ("fp32", "bf16", "fp16"):
    if not re.search(rf"^{dtype}\s", result.stdout, re.M):
        sys.exit(f"the README example printed no row for input dtype {dtype}")
