# tests/pyreport/html_report_test.py — `lav report`'s HTML page, loaded in headless chromium.
"""Usage: html_report_test.py LAV REPORT.h5 OUT_DIR.

Writes the page of REPORT (with itself as the baseline) through `lav report`, opens it in
headless chromium driven over the DevTools protocol, and checks: no console error, exception
or request beyond the file itself (the page opens offline); one plot per family, the baseline
and each case with a drift curve, each drawn; a screenshot of the plots holds many colours;
`run.html#<id>` scrolls a case's section to the top; the dumped chunk states are plotted. Also `lav report --help`, and exit 3
with how to install when Python or plotly is missing."""

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import websocket
from PIL import Image

LAV, REPORT, OUT = sys.argv[1:4]
PAGE = os.path.join(OUT, "run.html")
VARLEN = "pyreport_matrix[dtypes.inputs=bf16,dtypes.state=bf16,layout=head_last]/chunk/cpu/fwd"


def anchor(case_id):
    """README.md's mapping of a case id to its section's HTML id."""
    return re.sub(r"[^A-Za-z0-9._=-]", "_", case_id)


class Browser:
    """Headless chromium with one page, over the DevTools protocol."""

    def __init__(self, profile):
        chromium = shutil.which("chromium")
        if chromium is None:
            raise RuntimeError("chromium is not installed: run tools/setup.sh")
        self.log = open(os.path.join(profile, "chromium.log"), "w+")
        self.process = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.socket = websocket.create_connection(self._endpoint(), timeout=30,
                                                  suppress_origin=True)
        self.next_id, self.events = 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=1280, height=900,
                  deviceScaleFactor=1, mobile=False)

    def _endpoint(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            self.log.seek(0)
            found = re.search(r"DevTools listening on (ws://\S+)", self.log.read())
            if found:
                return found.group(1)
            time.sleep(0.1)
        raise RuntimeError("chromium did not start its DevTools endpoint")

    def call(self, method, session=False, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, event, seconds=30):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if any(e.get("method") == event for e in self.events):
                return
            self.events.append(json.loads(self.socket.recv()))
        raise RuntimeError(f"no {event} in {seconds} s")

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"]["value"]

    def close(self):
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()


def plots_expected():
    """One heat map per family, the baseline's, and one drift plot per case that has drift."""
    with h5py.File(REPORT, "r") as file:
        families = set(file["cases"]["family"])
        return len(families) + 1 + len(set(file["drift"]["case"]))


class HtmlReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        written = subprocess.run([LAV, "report", REPORT, "--baseline", REPORT, "-o", PAGE],
                                 capture_output=True, text=True, timeout=60)
        assert written.returncode == 0, written.stderr
        cls.profile = tempfile.mkdtemp()
        cls.browser = Browser(cls.profile)
        cls.browser.call("Page.navigate", session=True, url=f"file://{os.path.abspath(PAGE)}")
        cls.browser.wait_for("Page.loadEventFired")

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        shutil.rmtree(cls.profile, ignore_errors=True)

    def test_1_plots_are_drawn(self):
        plots = self.browser.evaluate("""[...document.querySelectorAll('.js-plotly-plot')].map(
            p => ({id: p.id, width: p.querySelector('svg.main-svg')?.getBoundingClientRect().width,
                   curves: p.querySelectorAll('path.js-line').length,
                   cells: p.querySelectorAll('.heatmaplayer image, .hm image').length}))""")
        self.assertEqual(len(plots), plots_expected())
        for plot in plots:
            self.assertGreater(plot["width"] or 0, 500, plot["id"])
            drawn = plot["curves"] if plot["id"].startswith("drift-") else plot["cells"]
            self.assertGreater(drawn, 0, plot["id"])
        # the run dumped its chunk states: they sit beside the tensors' curves
        traces = self.browser.evaluate(f"""document.getElementById(
            {json.dumps("drift-" + anchor(VARLEN))}).data.map(t => t.name)""")
        self.assertEqual(traces, ["o", "chunk states h (bf16)"])

    def test_2_no_console_error_and_nothing_fetched(self):
        errors, fetched = [], []
        for event in self.browser.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(params["exceptionDetails"])
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append(params["args"])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(params["entry"])
            elif method == "Network.requestWillBeSent":
                url = params["request"]["url"]
                if not url.startswith(("file:", "data:", "blob:", "about:")):
                    fetched.append(url)
        self.assertEqual(errors, [])
        self.assertEqual(fetched, [])

    def test_3_screenshot_of_the_plots_is_not_blank(self):
        box = self.browser.evaluate("""(() => { const m = document.getElementById('matrix');
            m.scrollIntoView(); const r = m.getBoundingClientRect();
            return {x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height}; })()""")
        shot = self.browser.call("Page.captureScreenshot", session=True, format="png",
                                 clip={**box, "scale": 1})
        png = base64.b64decode(shot["data"])
        with open(os.path.join(OUT, "matrix.png"), "wb") as kept:  # to look at when it fails
            kept.write(png)
        image = Image.open(io.BytesIO(png)).convert("RGB")
        colours = image.getcolors(maxcolors=1 << 20)
        self.assertGreater(len(colours), 200)
        # the background alone does not fill it
        self.assertLess(max(count for count, _ in colours), 0.9 * image.width * image.height)

    def test_4_a_case_is_reached_by_its_id(self):
        self.browser.call("Page.navigate", session=True,
                          url=f"file://{os.path.abspath(PAGE)}#{anchor(VARLEN)}")
        section = self.browser.evaluate(f"""(() => {{
            const s = document.getElementById({json.dumps(anchor(VARLEN))});
            return s && {{top: s.getBoundingClientRect().top, scrolled: window.scrollY,
                          title: s.querySelector('h3 a').textContent}}; }})()""")
        self.assertIsNotNone(section)
        self.assertEqual(section["title"], VARLEN)
        self.assertGreater(section["scrolled"], 1000)
        self.assertLess(abs(section["top"]), 2)


class LavReportCommand(unittest.TestCase):
    def run_lav(self, *args, **env):
        return subprocess.run([LAV, "report", *args], capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=60)

    def test_help(self):
        result = self.run_lav("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--baseline", result.stdout)

    def test_without_python(self):
        result = self.run_lav(REPORT, "-o", os.path.join(OUT, "none.html"),
                              LAV_PYTHON="/nonexistent/python3")
        self.assertEqual(result.returncode, 3)
        self.assertIn("tools/setup.sh", result.stderr)

    def test_without_plotly(self):
        with tempfile.TemporaryDirectory() as folder:
            os.makedirs(os.path.join(folder, "plotly"))
            with open(os.path.join(folder, "plotly", "__init__.py"), "w") as stub:
                stub.write("raise ImportError('no plotly here', name='plotly')\n")
            result = self.run_lav(REPORT, "-o", os.path.join(OUT, "none.html"),
                                  PYTHONPATH=folder)
        self.assertEqual(result.returncode, 3)
        self.assertIn("plotly is missing", result.stderr)
        self.assertIn("tools/setup.sh", result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
