"""Pictures of the offline tools' reports: SVG files and Mermaid charts.

For: `simulate --plot FILE.svg` (requested CPU and memory over allocatable, per node or,
on a large cluster, per zone, before and after, with what changed marked), the Mermaid
xychart of `simulate -o markdown` (GitHub renders it in a PR comment), and `explain
--heatmap FILE.svg` (nodes x scorers, coloured by normalized score, the weighted score
written in each cell).

Every function reads the command's JSON report (`simulate.to_json`, `explain.Report.to_json`)
and nothing else, so a picture shows exactly what `-o json` says; each drawn value carries
it as data-* attributes, which tests/unit/commands/test_plot.py compares with the JSON.

The SVG is written here, by hand: a few hundred rectangles and labels need no plotting
library (matplotlib would add ~40 MB and a second of import to a CLI that starts in
~0.1 s, and its SVG carries no per-bar data to test against).

What it must not do: compute anything the report does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from polsched.objects import Json

# More nodes than this and the utilisation picture shows zones (one bar per node would be
# taller than a screen and tell less).
MAX_NODE_ROWS = 40
# The Mermaid chart's x axis: at most this many categories (the changed nodes first).
MAX_MERMAID_BARS = 30

FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
BEFORE = "#b0b7c3"   # grey: the cluster as it is
AFTER = "#2f6fdf"    # blue: with the candidate's decisions
CHANGED = "#d9480f"  # orange: a row whose usage changed


def _attrs(**kw: Any) -> str:
    return " ".join(f"{k.replace('_', '-')}={quoteattr(str(v))}" for k, v in kw.items())


def _text(x: float, y: float, s: str, *, size: int = 12, anchor: str = "start",
          weight: str = "normal", fill: str = "#222") -> str:
    return (f"<text x=\"{x:.1f}\" y=\"{y:.1f}\" font-size=\"{size}\" "
            f"text-anchor=\"{anchor}\" font-weight=\"{weight}\" fill=\"{fill}\">"
            f"{escape(s)}</text>")


def _svg(width: float, height: float, body: Iterable[str], title: str) -> str:
    return "\n".join([
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
        f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0f}\" "
        f"height=\"{height:.0f}\" viewBox=\"0 0 {width:.0f} {height:.0f}\" {FONT}>",
        f"<title>{escape(title)}</title>",
        f"<rect width=\"{width:.0f}\" height=\"{height:.0f}\" fill=\"white\"/>",
        *body, "</svg>", ""])


# -- simulate: utilisation before and after -----------------------------------------------
def utilisation_rows(report: Json) -> tuple[str, list[Json]]:
    """("node" or "zone", the rows to draw): every node, or every zone when there are more
    than MAX_NODE_ROWS nodes. A row: {"name", "before", "after", "changed"}."""
    util = report.get("utilisation") or {}
    nodes = util.get("nodes") or []
    if len(nodes) <= MAX_NODE_ROWS:
        return "node", [{"name": n["node"], "before": n["before"], "after": n["after"],
                         "changed": n["before"] != n["after"]} for n in nodes]
    return "zone", [{"name": z["zone"] or "(no zone)", "before": z["before"],
                     "after": z["after"], "changed": z["before"] != z["after"]}
                    for z in util.get("zones") or []]


def _summary_line(report: Json) -> str:
    s = report.get("summary") or {}
    line = (f"{s.get('pods', 0)} pod(s): {s.get('scheduled', 0)} would schedule, "
            f"{s.get('unschedulable', 0)} would not")
    if "changed" in s:
        line += (f"; against {report.get('baseline')}: {s['changed']} change(s), "
                 f"{s.get('moved', 0)} moved, {s.get('newUnschedulable', 0)} newly "
                 "unschedulable")
    return line


RESOURCES = (("cpu", "CPU requested", "cpuPercent"),
             ("memory", "Memory requested", "memoryPercent"))


def utilisation_svg(report: Json) -> str:
    """Two panels (CPU, memory) of horizontal bars: per row, before (grey) and after
    (blue), the change in points on the right; rows whose usage changed are marked."""
    level, rows = utilisation_rows(report)
    label_w = min(max([len(r["name"]) for r in rows] + [8]) * 7.2 + 34, 260)
    fits = int((label_w - 34) / 7.2)  # characters of a row's name that fit
    panel_w, delta_w, gap = 300.0, 80.0, 28.0
    row_h, bar_h = 30.0, 11.0
    top = 92.0
    width = label_w + 2 * (panel_w + delta_w) + gap + 20
    height = top + row_h * max(len(rows), 1) + 56
    scale = max([100.0] + [float(r[w][k]) for r in rows for w in ("before", "after")
                           for _, _, k in RESOURCES])
    title = (f"polsched simulate: {report.get('policy')} against {report.get('source')}, "
             f"utilisation per {level}")
    body = [_text(12, 24, title, size=15, weight="bold"),
            _text(12, 44, _summary_line(report), size=12, fill="#444")]
    # Legend.
    lx = 12.0
    for color, name in ((BEFORE, "before"), (AFTER, "after (candidate)")):
        body.append(f"<rect x=\"{lx:.1f}\" y=\"54\" width=\"14\" height=\"10\" "
                    f"fill=\"{color}\"/>")
        body.append(_text(lx + 20, 63, name, size=11))
        lx += 40 + 7 * len(name)
    body.append(_text(lx, 63, f"\u25cf {level} whose usage changed", size=11, fill=CHANGED))
    for i, (res, heading, key) in enumerate(RESOURCES):
        x0 = label_w + i * (panel_w + delta_w + gap)
        body.append(_text(x0, top - 10, f"{heading}, % of allocatable", size=12,
                          weight="bold"))
        for tick in range(0, int(scale) + 1, 25):  # gridlines every 25 points
            tx = x0 + panel_w * tick / scale
            body.append(f"<line x1=\"{tx:.1f}\" y1=\"{top - 4:.1f}\" x2=\"{tx:.1f}\" "
                        f"y2=\"{top + row_h * len(rows):.1f}\" stroke=\"#e3e6ea\"/>")
            body.append(_text(tx, top + row_h * len(rows) + 14, f"{tick}%", size=10,
                              anchor="middle", fill="#666"))
        body.append(_text(x0 + panel_w + delta_w - 4, top - 10, "change", size=11,
                          anchor="end", fill="#444"))
        for j, r in enumerate(rows):
            y = top + j * row_h
            for k, (when, color) in enumerate((("before", BEFORE), ("after", AFTER))):
                pct = float(r[when][key])
                body.append(
                    f"<rect x=\"{x0:.1f}\" y=\"{y + 3 + k * (bar_h + 1):.1f}\" "
                    f"width=\"{panel_w * pct / scale:.2f}\" height=\"{bar_h:.1f}\" "
                    f"fill=\"{color}\" "
                    + _attrs(data_row=r["name"], data_level=level, data_resource=res,
                             data_when=when, data_percent=pct)
                    + f"><title>{escape(r['name'])} {res} {when}: {pct}%</title></rect>")
                if when == "after":
                    body.append(_text(x0 + panel_w * pct / scale + 4, y + 3 + 2 * bar_h,
                                      f"{pct:g}%", size=9, fill="#555"))
            delta = float(r["after"][key]) - float(r["before"][key])
            if round(delta, 1):
                body.append(_text(x0 + panel_w + delta_w - 4, y + 18, f"{delta:+.1f}",
                                  size=11, anchor="end", weight="bold",
                                  fill=CHANGED if delta else "#444"))
    for j, r in enumerate(rows):
        y = top + j * row_h
        fill = CHANGED if r["changed"] else "#222"
        name = r["name"] if len(r["name"]) <= fits else r["name"][:fits - 1] + "\u2026"
        body.append(_text(label_w - 10, y + 18, name, size=12, anchor="end", fill=fill,
                          weight="bold" if r["changed"] else "normal"))
        if r["changed"]:
            body.append(f"<circle cx=\"8\" cy=\"{y + 14:.1f}\" r=\"4\" fill=\"{CHANGED}\" "
                        + _attrs(data_changed=r["name"]) + "/>")
        pods_b, pods_a = r["before"].get("pods", 0), r["after"].get("pods", 0)
        if pods_a != pods_b:
            body.append(_text(label_w - 10, y + 29, f"pods {pods_b} \u2192 {pods_a}",
                              size=9, anchor="end", fill="#666"))
    if not rows:
        body.append(_text(label_w, top + 18, "no nodes in the report", fill="#666"))
    return _svg(width, height, body, title)


# -- simulate -o markdown: a Mermaid chart ---------------------------------------------------
def _mermaid_label(s: str) -> str:
    return '"' + s.replace('"', "'") + '"'


def mermaid_charts(report: Json) -> list[str]:
    """One xychart-beta per resource: bars after, a line before (Mermaid overlays several
    bar series rather than grouping them, so the before reads as a line across the bars).
    The changed rows first, at most MAX_MERMAID_BARS of them."""
    level, rows = utilisation_rows(report)
    rows = sorted(rows, key=lambda r: not r["changed"])[:MAX_MERMAID_BARS]
    if not rows:
        return []
    out = []
    names = ", ".join(_mermaid_label(r["name"]) for r in rows)
    for _, heading, key in RESOURCES:
        after = [float(r["after"][key]) for r in rows]
        before = [float(r["before"][key]) for r in rows]
        top = max([100.0, *after, *before])
        out.append("\n".join([
            "```mermaid",
            "xychart-beta",
            f"    title \"{heading} per {level}, % of allocatable (bars: after, line: before)\"",
            f"    x-axis [{names}]",
            f"    y-axis \"%\" 0 --> {top:g}",
            f"    bar [{', '.join(f'{v:g}' for v in after)}]",
            f"    line [{', '.join(f'{v:g}' for v in before)}]",
            "```"]))
    return out


def mermaid_section(report: Json) -> str:
    """The Markdown report's chart section ("" when there is nothing to draw)."""
    charts = mermaid_charts(report)
    if not charts:
        return ""
    return "\n".join(["", "#### Utilisation before and after", "",
                      *[c + "\n" for c in charts]])


# -- explain: nodes x scorers ------------------------------------------------------------------
def _heat(value: float) -> str:
    """White (0) to deep blue (100): the normalized score's colour."""
    t = min(max(value / 100.0, 0.0), 1.0)
    lo, hi = (247, 251, 255), (8, 81, 156)
    r, g, b = (round(lo[i] + (hi[i] - lo[i]) * t) for i in range(3))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap_cells(report: Json) -> tuple[list[str], list[Json]]:
    """(scorer names, node rows): the scorers that scored some node, in pipeline order
    (one that skipped every node, at PreScore, has no column); feasible nodes by total
    (best first), then the filtered ones with the plugin that rejected them."""
    nodes: Sequence[Mapping[str, Any]] = report.get("nodes") or []
    scored = {s for n in nodes for s in n.get("scores") or {}}
    scorers = [str(s["name"]) for s in report.get("scorers") or [] if s["name"] in scored]
    feasible = sorted((n for n in nodes if n.get("feasible")),
                      key=lambda n: (-(n.get("total") or 0), n["name"]))
    rejected = sorted((n for n in nodes if not n.get("feasible")), key=lambda n: n["name"])
    return scorers, [dict(n) for n in (*feasible, *rejected)]


def heatmap_svg(report: Json) -> str:
    scorers, nodes = heatmap_cells(report)
    winner = report.get("winner")
    label_w = min(max([len(n["name"]) for n in nodes] + [8]) * 7.2 + 28, 280)
    cell_w, cell_h, top = 96.0, 24.0, 64.0
    total_w = 70.0
    longest = max([len(s) + 4 for s in scorers] + [5])
    head_h = longest * 6.5 * 0.574 + 24  # the column labels, rotated 35 degrees
    width = label_w + cell_w * max(len(scorers), 1) + total_w + 24
    width = max(width, label_w + cell_w * (len(scorers) - 0.5) + longest * 5.4 + 24)
    title = f"polsched explain: {report.get('pod')} under {report.get('policy')}"
    sub = (f"winner {winner} (decided by {report.get('decidingScorer') or '-'}); colour: "
           "normalized score 0..100, number: weighted score")
    skipped = [str(s["name"]) for s in report.get("scorers") or [] if s["name"] not in scorers]
    skipped_line = "no score from (skipped at PreScore): " + ", ".join(skipped)
    width = max(width, len(sub) * 6.0 + 24, len(skipped_line) * 6.0 + 24 if skipped else 0)
    height = top + head_h + cell_h * max(len(nodes), 1) + 40
    if not winner:
        sub = "no node fits: " + str(report.get("message") or "")[:120]
    body = [_text(12, 24, title, size=15, weight="bold"), _text(12, 44, sub, size=11,
                                                                 fill="#444")]
    if skipped and any(n.get("feasible") for n in nodes):
        body.append(_text(12, 60, skipped_line, size=11, fill="#666"))
    y0 = top + head_h
    weights = {str(s["name"]): s.get("weight") for s in report.get("scorers") or []}
    for i, s in enumerate([*scorers, "total"]):
        x = label_w + i * cell_w + cell_w / 2
        label = s if s == "total" else f"{s} \u00d7{weights.get(s)}"
        body.append(f"<text transform=\"translate({x:.1f},{y0 - 8:.1f}) rotate(-35)\" "
                    f"font-size=\"11\" fill=\"#222\">{escape(label)}</text>")
    for j, n in enumerate(nodes):
        y = y0 + j * cell_h
        is_winner = n["name"] == winner
        body.append(_text(label_w - 10, y + 16, n["name"], size=12, anchor="end",
                          weight="bold" if is_winner else "normal",
                          fill="#222" if n.get("feasible") else "#999"))
        if not n.get("feasible"):
            plugin = (n.get("filter") or {}).get("plugin", "")
            body.append(
                f"<rect x=\"{label_w:.1f}\" y=\"{y + 1:.1f}\" "
                f"width=\"{cell_w * len(scorers):.1f}\" height=\"{cell_h - 2:.1f}\" "
                "fill=\"#f1f1f1\" "
                + _attrs(data_node=n["name"], data_filtered_by=plugin) + "/>")
            body.append(_text(label_w + 8, y + 16, f"filtered out by {plugin}", size=11,
                              fill="#888"))
            continue
        scores = n.get("scores") or {}
        for i, s in enumerate(scorers):
            x = label_w + i * cell_w
            sc = scores.get(s)
            if sc is None:
                continue
            norm, weighted = float(sc["normalized"]), sc["weighted"]
            body.append(
                f"<rect x=\"{x + 1:.1f}\" y=\"{y + 1:.1f}\" width=\"{cell_w - 2:.1f}\" "
                f"height=\"{cell_h - 2:.1f}\" fill=\"{_heat(norm)}\" "
                + _attrs(data_node=n["name"], data_scorer=s, data_normalized=sc["normalized"],
                         data_weighted=weighted, data_raw=sc["raw"])
                + f"><title>{escape(n['name'])} {escape(s)}: raw {sc['raw']}, normalized "
                  f"{sc['normalized']}, weighted {weighted}</title></rect>")
            body.append(_text(x + cell_w / 2, y + 16, str(weighted), size=11, anchor="middle",
                              fill="white" if norm > 55 else "#222"))
        x = label_w + len(scorers) * cell_w
        body.append(_text(x + total_w / 2, y + 16, str(n.get("total")), size=12,
                          anchor="middle", weight="bold" if is_winner else "normal"))
        if is_winner:
            body.append(f"<rect x=\"{label_w - 2:.1f}\" y=\"{y:.1f}\" "
                        f"width=\"{cell_w * len(scorers) + total_w + 4:.1f}\" "
                        f"height=\"{cell_h:.1f}\" fill=\"none\" stroke=\"{CHANGED}\" "
                        "stroke-width=\"2\" data-winner=\"true\"/>")
    return _svg(width, height, body, title)
