"""pytest hooks for lav's Python tests: the FLA provider test's per-family summary."""

import sys


def pytest_terminal_summary(terminalreporter):
    for name, module in list(sys.modules.items()):
        if not name.endswith("test_fla_provider_gpu"):
            continue
        lines = getattr(module, "LAV_FLA_SUMMARY", None)
        if isinstance(lines, list) and lines:
            terminalreporter.section("lav FLA provider summary")
            for line in lines:
                terminalreporter.write_line(line)
        break
