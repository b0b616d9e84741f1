"""The HTML report: self-contained, its tables and pictures present, and it renders in a real headless Chromium."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import layered_db
import pytest

from traceview import api


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A report of one run and a report comparing two runs (B exactly 2x faster per layer)."""
    folder = tmp_path_factory.mktemp("report")
    a = layered_db.build(folder / "a.db", "baseline").path
    b = layered_db.build(folder / "b.db", "candidate", scale=0.5).path
    return {
        "one": api.report(a, folder / "one.html"),
        "two": api.report(a, folder / "two.html", other=b),
    }


class _Page(HTMLParser):
    """Collects what the tests look at: tables (captions, headers, cells), images, links, scripts, headings."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, list[str]]] = []
        self.images: list[dict[str, str]] = []
        self.external: list[str] = []
        self.scripts = 0
        self.headings: list[str] = []
        self._text: list[str] | None = None
        self._where = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for name in ("src", "href"):
            if name in values and not values[name].startswith(("data:", "#")):
                self.external.append(values[name])
        if tag == "table":
            self.tables.append({"caption": [], "th": [], "td": []})
        elif tag == "img":
            self.images.append(values)
        elif tag == "script":
            self.scripts += 1
        if tag in ("caption", "th", "td", "h1", "h2", "h3"):
            self._text, self._where = [], tag

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._text is not None and tag == self._where:
            text = "".join(self._text).strip()
            if tag.startswith("h"):
                self.headings.append(text)
            else:
                self.tables[-1][tag].append(text)
            self._text = None


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def _table(page: _Page, caption_start: str) -> dict[str, list[str]]:
    found = [t for t in page.tables if t["caption"] and t["caption"][0].startswith(caption_start)]
    assert len(found) == 1, [t["caption"] for t in page.tables]
    return found[0]


def _decoded_png_sizes(page: _Page) -> list[tuple[int, int]]:
    sizes = []
    for image in page.images:
        prefix = "data:image/png;base64,"
        assert image["src"].startswith(prefix) and image["alt"]
        data = base64.b64decode(image["src"][len(prefix) :], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        sizes.append(struct.unpack(">II", data[16:24]))
    return sizes


def test_report_of_one_run(reports: dict[str, Path]) -> None:
    page = _parse(reports["one"])
    assert page.external == [] and page.scripts == 0
    assert page.headings[0] == "traceview report: baseline"
    assert "Layers (decode steps)" in page.headings
    assert "Timeline of step 1 (rank 0)" in page.headings
    # Pictures: the layers bars and the timeline, as PNG at slide width.
    assert [w for w, _ in _decoded_png_sizes(page)] == [1200, 1200]
    layers = _table(page, "per layer index")
    assert layers["th"][:3] == ["layer", "name", "instances"]
    columns = len(layers["th"])
    rows = [layers["td"][i : i + columns] for i in range(0, len(layers["td"]), columns)]
    assert [r[0] for r in rows] == [str(i) for i in range(layered_db.LAYERS)]
    assert {r[layers["th"].index("method")] for r in rows} == {"annotation"}
    assert {r[layers["th"].index("span_us")] for r in rows} == {str(layered_db.EXPECTED["span_us"])}
    steps = _table(page, "steps")
    assert len(steps["td"]) == layered_db.STEPS * len(steps["th"])
    assert _table(page, "overview")["td"][0] == "baseline"


def test_report_of_two_runs_leads_with_the_comparison(reports: dict[str, Path]) -> None:
    page = _parse(reports["two"])
    assert page.external == [] and page.scripts == 0
    assert page.headings[:2] == [
        "traceview report: baseline → candidate",
        "Comparison: baseline (A) → candidate (B), decode steps",
    ]
    assert "Run A: baseline" in page.headings and "Run B: candidate" in page.headings
    text = reports["two"].read_text(encoding="utf-8")
    assert "40 → 20 µs (2.00x faster)" in text
    # Diff picture, then layers + timeline of each run.
    assert len(_decoded_png_sizes(page)) == 5
    per_layer = _table(page, "per layer (medians")
    assert per_layer["th"][:2] == ["layer", "speedup"]  # the speed-up first; every column folded under it
    _table(page, "kernel alignment")
    _table(page, "kernels whose time per step changed most")


def test_cli_report(reports: dict[str, Path], tmp_path: Path) -> None:
    db = layered_db.build(tmp_path / "a.db", "baseline").path
    out = tmp_path / "r.html"
    result = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "report", str(db), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and result.stderr.strip() == f"wrote {out}", result.stderr
    assert out.stat().st_size > 50_000


# Debian's chromium-headless-shell (what CI installs), else a full Chromium run headless.
CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]
# Appended to a copy of the report: lists the decoded size of every image once the page has loaded.
PROBE = (
    '<script>addEventListener("load", () => { document.body.dataset.images ='
    ' [...document.images].map(i => i.naturalWidth + "x" + i.naturalHeight).join(" "); });</script>'
)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.heavy  # CI's heavy step installs the browser first
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install -y chromium-headless-shell)")
def test_report_renders_in_headless_chromium(reports: dict[str, Path], tmp_path: Path) -> None:
    report = reports["two"]
    shot = tmp_path / "report.png"
    result = _chromium(f"--screenshot={shot}", "--window-size=1400,2000", report.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])
    assert (width, height) == (1400, 2000) and shot.stat().st_size > 50_000
    # Every embedded picture decodes in the browser, and the DOM holds the tables.
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    result = _chromium("--dump-dom", probed.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    match = re.search(r'data-images="([^"]*)"', result.stdout)
    assert match is not None, result.stdout[:2000]
    sizes = match.group(1).split()
    assert len(sizes) == 5 and all(s.startswith("1200x") and not s.endswith("x0") for s in sizes)
    assert result.stdout.count("<table>") == len(_parse(report).tables)
