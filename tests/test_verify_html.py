"""`trainlint verify run --html FILE`: one self-contained page, rendered by headless Chromium to a PNG
(the browser part skips, with its reason, where Chromium is not installed)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainlint.diagnostics import DOCS_BASE_URL

SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "scripts"
CHART_BLUE, MARK_RED = (0x2F, 0x5F, 0xB3), (0xB3, 0x26, 0x1E)


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome", "chrome") if (found := shutil.which(name))), None)


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) bytes of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6)
    channels = 3 if color == 2 else 4
    raw, stride, rows, previous = zlib.decompress(b"".join(chunks)), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                nearest = min((abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner))[2]
                line[i] = (line[i] + nearest) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def _count(rows: list[bytes], channels: int, color: tuple[int, int, int], tolerance: int = 40) -> int:
    return sum(
        1 for row in rows for i in range(0, len(row), channels)
        if all(abs(row[i + k] - color[k]) <= tolerance for k in range(3))
    )


def _page(tmp_path: Path, script: str, steps: int, *script_args: str) -> str:
    page = tmp_path / f"{script}.html"
    # copied out of tests/: the linter treats files under a tests folder as test code, not training scripts
    shutil.copy(SCRIPTS / script, tmp_path / script)
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(tmp_path / script), "--steps", str(steps), "--device", "cpu",
         "--html", str(page), "--", *script_args],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    return page.read_text(encoding="utf-8")


def test_html_report_shows_static_findings_with_their_verdicts(tmp_path: Path):
    html = _page(tmp_path, "word_language_model_style.py", 5)
    assert "<b>TL401</b>" in html and 'badge bad">confirmed</span> .item() ran 1 time per step' in html


def test_html_report_is_self_contained_and_renders_in_chromium(tmp_path: Path):
    html = _page(tmp_path, "nanogpt_style.py", 20, "--corrupt_iter=9", "--dtype=bfloat16", "--cast_model=1")
    page = tmp_path / "nanogpt_style.py.html"
    # nothing to fetch, nothing to run; links only to the problems' pages and the cause lines' files
    assert not any(token in html.lower() for token in ("<script", "src=", "@import", "url("))
    links = re.findall(r'href="([^"]*)"', html)
    assert links and all(link.startswith((f"{DOCS_BASE_URL}/run/TLR", "file:///")) for link in links)
    # loss, gradient norm, step time (no CUDA memory on the CPU), and the update ratio of AdamW's two groups
    assert html.count("<svg") == 5 and html.count("update-to-weight ratio per step: AdamW group") == 2
    assert "bfloat16 resolution / 2 0.00391" in html  # the floor below which bf16 updates round away
    assert "spike at step 10" in html and "clip 1" in html and ">log scale</text>" in html and "step (log scale)" not in html  # the spike is 10,000x the rest
    # readable axes: round values on the value axis, steps on the other
    assert ">1000</text>" in html and re.search(r">[0-9.]+ ms</text>", html) and ">15</text>" in html
    assert "<h2>What trains</h2><p><span class=\"\">100.0%</span> of 28,032 parameter elements (28 tensors) train" in html
    assert f'<a href="{DOCS_BASE_URL}/run/TLR205-gradient-norm-spikes.md" title="rules/run/TLR205-gradient-norm-spikes.md"><code>TLR205</code></a> gradient-norm spikes' in html
    assert "transformer.ln_f.weight" in html and "model = model.to(ptdtype)" in html  # frozen, with the cast line
    assert "nanogpt_style.py:174</code>" in html  # sync sites by line

    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (.ci/run installs it from the Debian packages)")
    shot = tmp_path / "run.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={shot}",
         "--window-size=1100,1600", page.as_uri()],
        capture_output=True, timeout=120,
    )
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 1600)
    channels = len(rows[0]) // width
    assert _count(rows, channels, CHART_BLUE, 30) > 800  # the three series' lines were drawn
    assert _count(rows, channels, MARK_RED, 30) > 300  # the spike marker, problems and frozen rows
