"""`proctor report --html FILE`: one self-contained page (inline SVG plots, no script, no network),
readable from disk without a server. Plots are drawn with matplotlib (the `plots` extra):

- pass rate per cell with its Wilson interval, coloured by verdict;
- misbehaviour rate per cell;
- for a curriculum directory, the failure share and pass count round by round.

Every label comes from result files, which a student's run wrote part of (agent names, parameter
values): matplotlib escapes SVG text, and the table is escaped here."""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from ..results import write_atomically
from .cells import Cell
from .curriculum import Curriculum
from .report import Report

MAX_PLOTTED = 80  # cells drawn in a plot (the weakest first); the table lists them all
COLOURS = {"weak": "#c0392b", "frontier": "#d68910", "saturated": "#1e8449", "too_few": "#7f8c8d"}


def label(cell: Cell) -> str:
    parts = [cell.family or "*"]
    if cell.difficulty is not None:
        parts.append(f"d{cell.difficulty}")
    parts += [f"{k}={v}" for k, v in cell.params.items()]
    if cell.student:
        parts.append(f"[{cell.student}]")
    text = " ".join(parts)
    return text if len(text) <= 70 else text[:67] + "..."


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError(f"report --html needs the plots extra ({exc.name} is missing): pip install 'proctor[plots]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "proctor", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue and doctype: the page is HTML


def _cells_plot(plt, cells: Sequence[Cell]) -> str:
    height = 1.2 + 0.28 * len(cells)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, height), sharey=True, gridspec_kw={"width_ratios": [3, 1.4]})
    ys = list(range(len(cells)))[::-1]
    for y, c in zip(ys, cells):
        colour = COLOURS[c.verdict]
        # max(0, ...): at 0 or n passes the interval ends at the rate itself, give or take a rounding error.
        left.errorbar(c.pass_rate, y, xerr=[[max(0.0, c.pass_rate - c.ci[0])], [max(0.0, c.ci[1] - c.pass_rate)]], fmt="o", color=colour, capsize=3)
        right.barh(y, c.misbehaviour_rate, color="#8e44ad" if c.misbehaviour_rate else "#d5d8dc", height=0.6)
    left.set_yticks(ys, [label(c) for c in cells])
    left.set_xlim(-0.02, 1.02)
    left.set_xlabel("pass rate (Wilson interval)")
    left.grid(axis="x", alpha=0.3)
    for verdict, colour in COLOURS.items():
        left.plot([], [], "o", color=colour, label=verdict)
    left.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, fontsize=8, frameon=False)  # above: never over a point
    right.set_xlim(0, 1)
    right.set_xlabel("misbehaviour rate")
    right.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    svg = _svg(fig)
    plt.close(fig)
    return svg


def _rounds_plot(plt, curriculum: Curriculum) -> str:
    rounds = [r.round for r in curriculum.rounds]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(rounds, [r.failure_share for r in curriculum.rounds], "o-", color="#c0392b", label="failure share")
    ax.plot(rounds, [r.misbehaviour_rate for r in curriculum.rounds], "s--", color="#8e44ad", label="misbehaviour rate")
    ax.set_xticks(rounds)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    svg = _svg(fig)
    plt.close(fig)
    return svg


def _table(cells: Sequence[Cell]) -> str:
    head = ("cell", "n", "pass rate", "interval", "mean score", "misbehaviour", "tokens", "tool calls", "wall s", "infra", "verdict")
    rows = []
    for c in cells:
        kinds = ", ".join(f"{k} {v}" for k, v in c.misbehaviour_kinds.items())
        values = (label(c), c.n, f"{c.pass_rate:.2f}", f"{c.ci[0]:.2f}-{c.ci[1]:.2f}", f"{c.mean_score:.3f}",
                  f"{c.misbehaviour_rate:.2f}" + (f" ({kinds})" if kinds else ""), f"{c.mean_tokens:.0f}",
                  f"{c.mean_tool_calls:.1f}", f"{c.mean_wall_s:.1f}", c.infra_errors, c.verdict)
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values[:-1])
                    + f'<td class="{c.verdict}">{c.verdict}</td></tr>')
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def _cheating_table(report: Report) -> str:
    head = ("family", "student", "n", "flagged", "impossible", "impossible passed", "cheating rate", "interval")
    rows = ["<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
        ch.family, ch.student, ch.n, ch.flagged, ch.impossible, ch.impossible_passes, f"{ch.rate:.2f}",
        f"{ch.ci[0]:.2f}-{ch.ci[1]:.2f}")) + "</tr>" for ch in report.cheating]
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
.weak{color:#c0392b}.frontier{color:#d68910}.saturated{color:#1e8449}.too_few{color:#7f8c8d}
svg{max-width:100%;height:auto}"""


def render(report: Report, curriculum: Curriculum | None = None) -> str:
    plt = _pyplot()
    order = sorted(report.cells, key=lambda c: (c.verdict == "too_few", c.pass_rate))[:MAX_PLOTTED]
    plotted = [c for c in report.cells if c in order]
    t = report.thresholds
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>proctor report</title><style>{STYLE}</style></head><body>",
        "<h1>Proctor report</h1>",
        f"<p>{report.scored} scored rollout(s) of {len(report.students)} student(s) in {len(report.cells)} cell(s); "
        f"{report.infra_errors} infra error(s) excluded; {report.unreadable} unreadable file(s). Grouped by "
        f"{html.escape(', '.join(report.by))}. A pass is a completed rollout scoring at least {t.pass_score:g}; "
        f"verdicts: too_few under {t.min_n} rollouts, weak at a pass rate of at most {t.weak_at_most:g}, saturated "
        f"from {t.saturated_at_least:g}, frontier between; intervals are Wilson {t.confidence:.0%}.</p>",
    ]
    if curriculum and curriculum.rounds:
        parts += [f"<h2>Curriculum: {html.escape(curriculum.family)} with {html.escape(curriculum.agent)}</h2>",
                  _rounds_plot(plt, curriculum)]
    if plotted:
        more = f" (the {len(plotted)} weakest of {len(report.cells)})" if len(plotted) < len(report.cells) else ""
        parts += [f"<h2>Pass rate and misbehaviour per cell{more}</h2>", _cells_plot(plt, plotted)]
    parts += ["<h2>Cells</h2>", _table(report.cells)]
    if report.cheating:
        parts += ["<h2>Cheating rate per student and family</h2>",
                  "<p>Rollouts that passed an impossible instance (no honest pass exists) or had a flagged attempt, "
                  "each counted once; impossible instances are left out of the cells above.</p>", _cheating_table(report)]
    if report.problems:
        parts.append("<h2>Unreadable files</h2><ul>" + "".join(
            f"<li>{html.escape(p.path)}: {html.escape(p.reason)}</li>" for p in report.problems) + "</ul>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_html(report: Report, path: str | Path, curriculum: Curriculum | None = None) -> Path:
    path = Path(path)
    if not path.parent.is_dir():
        raise ConfigError(f"--html {path}: directory {path.parent} does not exist")
    write_atomically(path, render(report, curriculum))
    return path
