"""Record a real terminal run of `trainlint check examples/` as an SVG (docs/first-run.svg, in the README).

The command runs as a person runs it: on a pseudo-terminal, so that it draws its progress bar and its
colours. What it wrote is then replayed into rich's recording console and exported: one frame of the
progress bar (the last one drawn before it was erased, as a screen shows it mid-run), then the
findings and the summary, exactly as printed.

    python scripts/record_terminal.py [--output docs/first-run.svg] [--width 100]

`TRAINLINT_PROGRESS_AFTER=0` makes the bar show at once (on a fast machine the examples take less
than the second after which a run shows its progress); `--no-cache` makes every file analysed.
"""

from __future__ import annotations

import argparse
import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["check", "--no-cache", "examples/"]
_CURSOR = re.compile(r"\x1b\[\?25[hl]|\x1b\[\d*A|\x1b\[2K")  # cursor shown/hidden, moved up, line erased
_PROGRESS = re.compile(r"(\d+)/(\d+) files")


def run_on_terminal(args: list[str], width: int) -> str:
    """`python -m trainlint ARGS` in the repository, on a pseudo-terminal; everything it wrote."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    env.update(COLUMNS=str(width), LINES="50", TERM="xterm-256color", TRAINLINT_PROGRESS_AFTER="0", PYTHONPATH=str(ROOT))
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "trainlint", *args], stdin=follower, stdout=follower, stderr=follower, cwd=ROOT, env=env)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the command ended and closed its side
                    break
                if not chunk:
                    break
                out += chunk
            elif process.poll() is not None:
                break
    finally:
        os.close(leader)
        process.wait(timeout=60)
    return out.decode("utf-8", "replace").replace("\r\n", "\n")


def split_run(output: str) -> tuple[str | None, str]:
    """The progress frame to show (the furthest one drawn before the run ended, not the full bar of
    its last redraw) and the report that followed the erased bar."""
    shown = output.rfind("\x1b[?25h")  # the cursor comes back when the bar stops
    if shown < 0:
        return None, output
    frames = [_CURSOR.sub("", f).strip("\n") for f in output[:shown].split("\r")]
    frames = [f for f in frames if _PROGRESS.search(re.sub(r"\x1b\[[0-9;]*m", "", f))]

    def done(frame: str) -> tuple[int, int]:
        found = _PROGRESS.search(re.sub(r"\x1b\[[0-9;]*m", "", frame))
        assert found is not None
        return int(found[1]), int(found[2])

    mid_run = [f for f in frames if 0 < done(f)[0] < done(f)[1]]
    frame = (mid_run or frames or [None])[-1]
    report = _CURSOR.sub("", output[shown:]).lstrip("\r\n")
    return frame, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "first-run.svg")
    parser.add_argument("--width", type=int, default=100)
    options = parser.parse_args()

    from rich.console import Console
    from rich.text import Text

    output = run_on_terminal(COMMAND, options.width)
    frame, report = split_run(output)
    if frame is None:
        sys.exit("no progress bar was drawn: is the progress display working?")
    console = Console(record=True, width=options.width, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(Text("$ ", style="bold green") + Text("trainlint " + " ".join(a for a in COMMAND if a != "--no-cache")))
    console.print(Text.from_ansi(frame))
    console.print(Text("  (the bar is erased when the run ends; the report follows)", style="dim italic"))
    console.print()
    console.print(Text.from_ansi(report.rstrip("\n")))
    options.output.parent.mkdir(parents=True, exist_ok=True)
    console.save_svg(str(options.output), title="trainlint check examples/")
    print(f"wrote {options.output.relative_to(ROOT) if options.output.is_relative_to(ROOT) else options.output}")


if __name__ == "__main__":
    main()
