"""lav.html — a lav report as one self-contained HTML page, plotly inlined: `python -m lav.html`."""

from __future__ import annotations

import argparse
import html
import os
import re
import shlex
import sys

try:
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from lav.report import Report, ReportError, read_intermediates, read_report, sequence_starts
except ImportError as error:  # main() says what to install: `lav report` exits 3
    MISSING = error
else:
    MISSING = None

DTYPE_ORDER = ["fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
# more boundary lines than this in one plot would hide the curves
MAX_BOUNDARIES = 400

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; }
.pass { color: #176f2c; } .fail { color: #b3261e; font-weight: bold; }
.error { color: #8a4b00; font-weight: bold; } .incomplete { background: #fff3cd; padding: 0.5em; }
.worse { background: #fde2e1; } .better { background: #e1f5e4; }
section.case { border-top: 2px solid #888; margin-top: 2em; }
"""


def anchors(ids) -> dict[str, str]:
    """Case id → HTML id: characters other than letters, digits and `._=-` become `_` (the
    name of the case's `--dump-intermediates` file); an id that repeats one gets `-2`, `-3`."""
    taken, result = set(), {}
    for case_id in ids:
        base = re.sub(r"[^A-Za-z0-9._=-]", "_", case_id)
        anchor, n = base, 1
        while anchor in taken:
            n += 1
            anchor = f"{base}-{n}"
        taken.add(anchor)
        result[case_id] = anchor
    return result


def _e(value) -> str:
    return html.escape(str(value))


def _cell(value) -> str:
    if isinstance(value, (float, np.floating)):
        return f'<td class="num">{value:.3g}</td>'
    if isinstance(value, (int, np.integer)):
        return f'<td class="num">{value}</td>'
    text = str(value)
    return f"<td><pre>{_e(text)}</pre></td>" if "\n" in text else f"<td>{_e(text)}</td>"


def _table(frame: pd.DataFrame, links: dict[str, str] | None = None,
           row_class=None) -> str:
    """A frame as an HTML table; with `links`, a `case` or `id` column links to the case."""
    if frame.empty:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record):
            if links and column in ("case", "id") and value in links:
                cells.append(f'<td><a href="#{_e(links[value])}">{_e(value)}</a></td>')
            else:
                cells.append(_cell(value))
        css = f' class="{row_class(record)}"' if row_class else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _plot(figure, div_id: str) -> str:
    return pio.to_html(figure, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _verdict(verdict: str) -> str:
    return f'<span class="{_e(verdict)}">{_e(verdict.upper())}</span>'


def _dtype_rank(dtype: str) -> int:
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def _header(report: Report) -> str:
    attrs = report.attrs
    names = ["lav_version", "git_commit", "torch_version", "hdf5_version", "device", "providers",
             "started_at", "seed", "case_count", "command_line"]
    rows = pd.DataFrame({"attribute": [n for n in names if n in attrs],
                         "value": [str(attrs[n]) for n in names if n in attrs]})
    warning = "" if report.complete else (
        '<p class="incomplete">This run did not finish (the report is marked incomplete): '
        "it holds the cases that had finished.</p>")
    return f"<h1>lav report: {_e(os.path.basename(report.path))}</h1>{warning}{_table(rows)}"


def _summary(report: Report, links: dict[str, str]) -> str:
    counts = report.summary["verdict"].value_counts()
    line = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("pass", "fail", "error"))
    findings = report.findings[["case", "kind", "tensor", "message"]]
    return (f'<section id="summary"><h2>Summary</h2><p>{len(report.summary)} cases: {line} '
            f'(<a href="#cases">every case</a>)</p>'
            f"<h3>Findings ({len(findings)})</h3>{_table(findings, links)}</section>")


def _case_index(report: Report, links: dict[str, str]) -> str:
    table = report.summary[["id", "verdict", "worst_tensor", "worst_rel_rmse", "worst_bound",
                            "seconds"]]
    return (f'<section id="cases"><h2>Cases</h2>{_table(table, links, lambda r: r.verdict)}'
            "</section>")


def _matrix_frame(report: Report) -> pd.DataFrame:
    """Each measured tensor's rel_rmse beside its case's place on the matrix axes."""
    axes = report.summary[["id", "family", "input_dtype", "state_dtype", "layout", "variant",
                           "backend", "pass"]]
    measured = report.metrics[["case", "tensor", "rel_rmse"]]
    return measured.merge(axes, left_on="case", right_on="id")


def _heat_map(family: str, frame: pd.DataFrame) -> go.Figure:
    """rel_rmse of one family: rows input × state dtype, columns variant × backend × pass ×
    layout; a cell is the largest rel_rmse of its cases (NaN the largest); a menu picks the
    tensor."""
    frame = frame.assign(
        row=frame["input_dtype"] + " in / " + frame["state_dtype"] + " state",
        column=frame["variant"] + "/" + frame["backend"] + "/" + frame["pass"] + "<br>" +
        frame["layout"],
        rank=frame["rel_rmse"].fillna(np.inf),
        input_rank=frame["input_dtype"].map(_dtype_rank),
        state_rank=frame["state_dtype"].map(_dtype_rank))
    rows = list(dict.fromkeys(frame.sort_values(["input_rank", "state_rank"])["row"]))
    columns = sorted(frame["column"].unique())
    tensors = ["every tensor", *sorted(frame["tensor"].unique())]
    figure = go.Figure()
    for i, tensor in enumerate(tensors):
        part = frame if i == 0 else frame[frame["tensor"] == tensor]
        worst = part.loc[part.groupby(["row", "column"])["rank"].idxmax()]
        grid = worst.pivot(index="row", columns="column")
        value, case, name = (grid[field].reindex(index=rows, columns=columns)
                             for field in ("rel_rmse", "case", "tensor"))
        measured, value = case.notna(), value.astype(float)
        text = value.map("{:.1e}".format).where(measured, "")
        hover = case.astype(str) + "<br>" + name.astype(str) + ": " + text
        figure.add_trace(go.Heatmap(
            z=np.log10(value.where(value > 0)), x=columns, y=rows, text=text,
            hovertext=hover.where(measured, ""),
            texttemplate="%{text}", hoverinfo="text", colorscale="Viridis", visible=i == 0,
            colorbar={"title": "log10 rel_rmse"}))
    buttons = [{"label": t, "method": "update",
                "args": [{"visible": [j == i for j in range(len(tensors))]}]}
               for i, t in enumerate(tensors)]
    figure.update_layout(
        title=f"{family}: largest rel_rmse", height=160 + 45 * len(rows),
        yaxis={"autorange": "reversed"},
        updatemenus=[{"buttons": buttons, "x": 1.0, "y": 1.15, "xanchor": "right"}],
        margin={"t": 70})
    return figure


def _matrix(report: Report) -> str:
    frame = _matrix_frame(report)
    parts = ["<section id=\"matrix\"><h2>rel_rmse over the matrix</h2>"
             "<p>One heat map per family. A row is an input dtype with a state dtype, a column "
             "a variant, backend, pass and layout; a cell holds the largest rel_rmse of the "
             "cases there (every scenario and shape of the run), hover names the case. The "
             "menu picks one tensor.</p>"]
    for family, part in frame.groupby("family", sort=True):
        parts.append(_plot(_heat_map(family, part), f"matrix-{family}"))
    return "".join(parts) + "</section>"


def _moved(report: Report, baseline: Report, links: dict[str, str]) -> str:
    """Each case and tensor's rel_rmse beside the baseline's, largest change first."""
    both = report.metrics[["case", "tensor", "rel_rmse"]].merge(
        baseline.metrics[["case", "tensor", "rel_rmse"]], on=["case", "tensor"],
        suffixes=("", "_baseline"))
    both["ratio"] = both["rel_rmse"] / both["rel_rmse_baseline"]
    both = both.iloc[np.argsort(-np.abs(np.log(both["ratio"].to_numpy())), kind="stable")]
    only_run = sorted(set(report.summary["id"]) - set(baseline.summary["id"]))
    only_base = sorted(set(baseline.summary["id"]) - set(report.summary["id"]))
    grid = both.pivot_table(index="case", columns="tensor", values="ratio", aggfunc="first")
    figure = go.Figure(go.Heatmap(
        z=np.log10(grid.to_numpy()), x=list(grid.columns), y=list(grid.index),
        colorscale="RdBu_r", zmid=0, colorbar={"title": "log10 run / baseline"},
        customdata=grid.to_numpy(), hovertemplate="%{y}<br>%{x}: ×%{customdata:.3f}"))
    figure.update_layout(title="rel_rmse, run / baseline", height=200 + 18 * len(grid),
                         yaxis={"autorange": "reversed", "tickfont": {"size": 9}},
                         margin={"l": 20})
    figure.update_yaxes(showticklabels=len(grid) <= 60)
    missing = "".join(f"<details><summary>{len(ids)} cases only in the {side}</summary>"
                      f"<p>{_e(', '.join(ids))}</p></details>"
                      for side, ids in (("run", only_run), ("baseline", only_base)) if ids)

    def moved(record):
        return "worse" if record.ratio > 1.1 else "better" if record.ratio < 1 / 1.1 else ""

    return (f'<section id="baseline"><h2>Against the baseline</h2>'
            f"<p>Baseline: {_e(baseline.path)} ({_e(baseline.attrs.get('git_commit', ''))}). "
            f"Ratios above 1.1 are marked worse, below 1/1.1 better.</p>{missing}"
            f"{_plot(figure, 'baseline-moved')}{_table(both, links, moved)}</section>")


def _boundaries(case: pd.Series, block: int, length: int) -> list[dict]:
    """Vertical lines: each sequence's start (dashed) and its chunk starts (dotted)."""
    starts = sequence_starts(case["cu_seqlens"]) or [0, length]
    lines = []
    for start, end in zip(starts, starts[1:]):
        if start > 0:
            lines.append((start, "dash", "#d62728"))
        lines += [(p, "dot", "#999") for p in range(start + block, end, block)]
    if len(lines) > MAX_BOUNDARIES:
        lines = [line for line in lines if line[1] == "dash"]
    return [{"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
             "line": {"dash": dash, "color": color, "width": 1}} for x, dash, color in lines]


def _drift_plot(case: pd.Series, drift: pd.DataFrame, chunks: pd.DataFrame,
                div_id: str) -> str:
    block = int(drift["block"].iloc[0])
    found = re.search(r"(?:^|_)T(\d+)", case["shape"])
    length = int(found.group(1)) if found else int(drift["position"].max()) + block
    figure = go.Figure()
    for tensor, curve in drift.groupby("tensor", sort=False):
        # a step per block, closed at the end of the sequence axis
        x = [*curve["position"], length]
        y = [*curve["rel_rmse"], curve["rel_rmse"].iloc[-1]]
        figure.add_trace(go.Scatter(x=x, y=y, name=tensor, mode="lines", line_shape="hv"))
    for dtype, states in chunks.groupby("state_dtype"):
        figure.add_trace(go.Scatter(
            x=states["position"], y=states["rel_rmse"], mode="markers",
            name=f"chunk states h ({dtype})", marker={"symbol": "x", "size": 6},
            customdata=states[["chunk", "sequence"]].to_numpy(),
            hovertemplate="chunk %{customdata[0]} (sequence %{customdata[1]}): %{y:.3e}"))
    figure.update_layout(
        title="rel_rmse along the sequence (dotted: chunk starts, dashed: sequence starts)",
        xaxis_title="position", yaxis={"type": "log", "title": "rel_rmse", "exponentformat": "e"},
        shapes=_boundaries(case, block, length), height=360, margin={"t": 50})
    return _plot(figure, div_id)


CASE_TABLES = ("metrics", "findings", "contract", "trace", "drift", "chunks")


def _case_section(case: pd.Series, tables: dict[str, pd.DataFrame], anchor: str) -> str:
    """One case: its attributes, metrics, drift plot, findings, contract and trace."""
    case_id = case["id"]
    pick = {name: frame.drop(columns="case") for name, frame in tables.items()}
    facts = ", ".join(f"{name} {case[name]}" for name in (
        "family", "shape", "input_dtype", "gate_dtype", "state_dtype", "output_dtype", "layout",
        "cu_seqlens", "kernel", "seed", "seconds") if name in case and str(case[name]) != "")
    message = f"<pre>{_e(case['message'])}</pre>" if case.get("message") else ""
    drift = "" if pick["drift"].empty else _drift_plot(case, pick["drift"], pick["chunks"],
                                                       f"drift-{anchor}")
    return (f'<section class="case" id="{_e(anchor)}">'
            f'<h3><a href="#{_e(anchor)}">{_e(case_id)}</a> {_verdict(case["verdict"])}</h3>'
            f"<p>{_e(facts)}</p>{message}"
            f"<h4>Metrics</h4>{_table(pick['metrics'])}{drift}"
            f"<h4>Findings, with dtype histories</h4>{_table(pick['findings'])}"
            f"<h4>Precision contract</h4>{_table(pick['contract'])}"
            f"<details><summary>Trace ({len(pick['trace'])} rows)</summary>"
            f"{_table(pick['trace'])}</details></section>")


def render(report: Report, baseline: Report | None = None) -> str:
    """The whole page as a string."""
    links = anchors(report.summary["id"])
    cases = report.cases.set_index("id", drop=False)
    by_case = {name: dict(tuple(getattr(report, name).groupby("case", sort=False)))
               for name in CASE_TABLES}
    sections = [_header(report), _summary(report, links), _matrix(report)]
    if baseline is not None:
        sections.append(_moved(report, baseline, links))
    sections.append(_case_index(report, links))
    empty = {name: getattr(report, name).iloc[:0] for name in CASE_TABLES}
    for case_id, anchor in links.items():
        tables = {name: by_case[name].get(case_id, empty[name]) for name in CASE_TABLES}
        sections.append(_case_section(cases.loc[case_id], tables, anchor))
    # the library goes in once, before the figures' scripts call it
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>lav report: {_e(os.path.basename(report.path))}</title>"
            f"<style>{STYLE}</style><script>{get_plotlyjs()}</script></head>"
            f"<body>{''.join(sections)}</body></html>")


def write_report(run: str, out: str, baseline: str | None = None,
                 intermediates: str | None = None) -> None:
    """Writes the page of report `run` to `out`; `intermediates` is `--dump-intermediates`'s
    folder (default: the one the run's command line names, when it exists)."""
    report = read_report(run)
    folder = intermediates or _dumped_folder(report)
    if folder:
        report.chunks = read_intermediates(folder, report.cases)
    page = render(report, read_report(baseline) if baseline else None)
    with open(out, "w", encoding="utf-8") as file:
        file.write(page)


def _dumped_folder(report: Report) -> str | None:
    words = shlex.split(report.attrs.get("command_line", ""))
    # `--dump-intermediates DIR` or `--dump-intermediates=DIR`
    for flag, value in [*zip(words, words[1:]), *(w.split("=", 1) for w in words if "=" in w)]:
        if flag == "--dump-intermediates" and os.path.isdir(value):
            return value
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lav report", description="Writes a lav report as one self-contained HTML page.")
    parser.add_argument("run", help="the report (RUN.h5) to show")
    parser.add_argument("-o", "--out", required=True, help="the HTML file to write")
    parser.add_argument("--baseline", help="a report to compare with: what moved, per tensor")
    parser.add_argument("--intermediates", help="the folder of `lav run --dump-intermediates` "
                        "(default: the one the run's command line names, if it exists)")
    args = parser.parse_args(argv)
    if MISSING is not None:
        print(f"lav report: {MISSING.name} is missing from {sys.executable}: run tools/setup.sh "
              "(it makes .venv with plotly, h5py and pandas), pip install plotly h5py pandas "
              "into that Python, or name another one in LAV_PYTHON", file=sys.stderr)
        return 3
    try:
        write_report(args.run, args.out, args.baseline, args.intermediates)
    except (OSError, KeyError, ReportError) as error:  # an unreadable report, or not one
        print(f"lav report: {error}", file=sys.stderr)
        return 2
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
