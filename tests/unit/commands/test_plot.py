"""The pictures say what the JSON report says: `simulate --plot` (per node, or per zone on
a large cluster), the Mermaid chart of `simulate -o markdown`, and `explain --heatmap`.
Each drawn value carries its number as data-* attributes; the SVG is parsed and compared
with `-o json` of the same run. A real renderer (rsvg-convert) must accept the files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.commands import cli, plot, snapshot
from tests.unit import test_explain as ex
from tests.unit.test_simulate import cluster, node, pod, policy

pytestmark = pytest.mark.unit

SVG = "{http://www.w3.org/2000/svg}"


def run_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], objs: list[Any],
                 *extra: str) -> tuple[dict[str, Any], ET.Element]:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
    cand = tmp_path / "candidate.yaml"
    cand.write_text(yaml.safe_dump(policy(reverse=True)))
    svg = tmp_path / "plot.svg"
    code = cli.main(["simulate", "-f", str(cand), "--snapshot", str(snap), "-o", "json",
                     "--plot", str(svg), *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), ET.parse(svg).getroot()


def bars(root: ET.Element) -> dict[tuple[str, str, str], float]:
    """(row, resource, before|after) -> percent, from the SVG's bars."""
    out = {}
    for r in root.iter(f"{SVG}rect"):
        if "data-resource" in r.attrib:
            key = (r.attrib["data-row"], r.attrib["data-resource"], r.attrib["data-when"])
            assert key not in out, key
            out[key] = float(r.attrib["data-percent"])
    return out


def expected(rows: list[dict[str, Any]], name: str) -> dict[tuple[str, str, str], float]:
    return {(r[name] or "(no zone)", res, when): float(r[when][f"{res}Percent"])
            for r in rows for res in ("cpu", "memory") for when in ("before", "after")}


def test_simulate_plot_draws_every_nodes_utilisation_from_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, root = run_simulate(tmp_path, capsys, cluster())
    nodes = report["utilisation"]["nodes"]
    assert bars(root) == expected(nodes, "node")
    assert {r.attrib["data-level"] for r in root.iter(f"{SVG}rect")
            if "data-level" in r.attrib} == {"node"}
    # What changed is marked: exactly the nodes whose usage differs.
    marked = {c.attrib["data-changed"] for c in root.iter(f"{SVG}circle")}
    assert marked == {n["node"] for n in nodes if n["before"] != n["after"]} != set()
    # Bar lengths are proportional to the percentages.
    widths = {(r.attrib["data-row"], r.attrib["data-resource"], r.attrib["data-when"]):
              float(r.attrib["width"]) for r in root.iter(f"{SVG}rect")
              if "data-resource" in r.attrib}
    full = [w / p for k, w in widths.items() if (p := bars(root)[k]) > 0]
    assert full and max(full) - min(full) < 0.01


def test_a_large_cluster_is_drawn_per_zone(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    objs: list[Any] = [node(f"n{i:02d}", i, "abc"[i % 3]) for i in range(plot.MAX_NODE_ROWS + 5)]
    objs += [policy(), pod("running", created="2026-01-01T00:00:00Z", node_name="n07")]
    objs += [pod(f"p{i}", created=f"2026-01-01T00:00:{i + 10:02d}Z") for i in range(5)]
    report, root = run_simulate(tmp_path, capsys, objs)
    zones = report["utilisation"]["zones"]
    assert len(zones) == 3
    assert bars(root) == expected(zones, "zone")


def test_markdown_embeds_a_mermaid_chart_of_the_same_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, _ = run_simulate(tmp_path, capsys, cluster())
    snap, cand = tmp_path / "snap.json", tmp_path / "candidate.yaml"
    assert cli.main(["simulate", "-f", str(cand), "--snapshot", str(snap), "-o",
                     "markdown"]) == 0
    md = capsys.readouterr().out
    charts = re.findall(r"```mermaid\n(.*?)```", md, re.S)
    assert len(charts) == 2  # CPU and memory
    nodes = {n["node"]: n for n in report["utilisation"]["nodes"]}
    for chart, key in zip(charts, ("cpuPercent", "memoryPercent"), strict=True):
        lines = [x.strip() for x in chart.splitlines()]
        assert lines[0] == "xychart-beta"
        axis = re.fullmatch(r"x-axis \[(.*)\]", next(x for x in lines if x.startswith("x-")))
        assert axis is not None
        names = [s.strip().strip('"') for s in axis[1].split(",")]
        after = json.loads(next(x for x in lines if x.startswith("bar "))[4:])
        before = json.loads(next(x for x in lines if x.startswith("line "))[5:])
        assert after == [nodes[n]["after"][key] for n in names]
        assert before == [nodes[n]["before"][key] for n in names]
        assert set(names) == set(nodes)


def test_explain_heatmap_holds_every_scorers_weighted_score(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(ex.POLICY))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all(ex.NODES))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(ex.pod("p")))
    svg = tmp_path / "heat.svg"
    assert cli.main(["explain", "--policy", str(tmp_path / "policy.yaml"), "--nodes",
                     str(tmp_path / "nodes.yaml"), "--pod", str(tmp_path / "pod.yaml"),
                     "-o", "json", "--heatmap", str(svg)]) == 0
    report = json.loads(capsys.readouterr().out)
    root = ET.parse(svg).getroot()
    cells = {(r.attrib["data-node"], r.attrib["data-scorer"]): r.attrib
             for r in root.iter(f"{SVG}rect") if "data-scorer" in r.attrib}
    want = {(n["name"], s): sc for n in report["nodes"] if n["feasible"]
            for s, sc in n["scores"].items()}
    assert set(cells) == set(want) and want
    for k, sc in want.items():
        assert (int(cells[k]["data-weighted"]), int(cells[k]["data-normalized"]),
                int(cells[k]["data-raw"])) == (sc["weighted"], sc["normalized"], sc["raw"])
    filtered = {r.attrib["data-node"]: r.attrib["data-filtered-by"]
                for r in root.iter(f"{SVG}rect") if "data-filtered-by" in r.attrib}
    assert filtered == {n["name"]: n["filter"]["plugin"] for n in report["nodes"]
                        if not n["feasible"]}
    assert [r for r in root.iter(f"{SVG}rect") if r.attrib.get("data-winner")]
    assert report["winner"] in "".join(t.text or "" for t in root.iter(f"{SVG}text"))


@pytest.mark.skipif(shutil.which("rsvg-convert") is None,
                    reason="rsvg-convert (Debian librsvg2-bin) is not installed")
def test_a_real_renderer_draws_both_pictures(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    run_simulate(tmp_path, capsys, cluster())
    p = subprocess.run(["rsvg-convert", "-o", str(tmp_path / "plot.png"),
                        str(tmp_path / "plot.svg")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
