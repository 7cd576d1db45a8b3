"""Every benchmark in one run, and every ratio it prints in one table.

Runs each ``bench/bench_*.py`` in turn (its own process; with ``--quick``, with fewer rounds each: the figures
are noisier, the ratios keep their sense), collects each line of its output that carries a ratio (``(x1.5)``,
``(agent/local x 1.2)``, ``1.05x``) and prints them as one table: the benchmark, the row, and each ratio with
what it compares. A benchmark that cannot run here (a tool, an engine or an optional package missing) is listed
with its last error line instead of failing the run.

    .venv/bin/python bench/run_all.py [--quick] [--only cli,fleet,...] [--timeout 900]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: fewer rounds per benchmark for --quick (the defaults of each script otherwise)
QUICK: dict[str, list[str]] = {
    "agent": ["--actions", "50", "--shots", "10"],
    "aio": ["--rounds", "2", "--actions", "10", "--shots", "2", "--calls", "50"],
    "capture": ["--shots", "15"],
    "cli": ["--calls", "8", "--cycles", "3", "--fleet", "8", "--fleet-rounds", "1"],
    "cua": ["--iterations", "20", "--cycles", "3", "--rounds", "2", "--tree-files", "50"],
    "daytona": ["--iterations", "30", "--cycles", "3", "--file-rounds", "2"],
    "docker": ["--rounds", "8", "--fast-rounds", "50", "--lifecycles", "2"],
    "files": ["--rounds", "2"],
    "fleet": ["--sizes", "16,64"],
    "ledger": ["--sessions", "50", "--procs", "4", "--per-proc", "10", "--reservations", "50", "--rows", "10000",
               "--process-rounds", "2", "--reserve-rounds", "5"],
    "mcp": ["--calls", "20"],
    "preflight": ["--rounds", "3"],
    "record": ["--actions", "24"],
    "scale": ["--desktops", "4", "--rounds", "30"],
    "ssh": ["--clicks", "20", "--naive-clicks", "10", "--shots", "5", "--naive-shots", "5"],
    "typing": ["--rounds", "1"],
    "use_computer": ["--iterations", "30", "--cycles", "3", "--file-mb", "8", "--files", "50", "--rounds", "2"],
    "view": ["--seconds", "2"],
    "xvfb": ["--actions", "50", "--naive-actions", "10", "--shots", "10", "--ups", "3"],
}

# "(xwd 12.0 ms (x   0.3)" / "(agent/local x 1.2)" / "(deskctl/mss x0.48)": the words before the x say what
_PAREN_RATIO = re.compile(r"\(([^()]*?)\bx\s*(-?\d+(?:\.\d+)?)\)")
# "  1.05x" at the end of a cell (compare_action's overhead ratio)
_TRAILING_RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)x(?![\w])")
# "deskctl/naive 1.03 (target 1.1)" (bench_files): the names of the two sides, then their ratio
_NAMED_RATIO = re.compile(r"(?<![\w/])([a-z]+/[a-z]+)\s+(\d+\.\d+)(?![\w.])")
# "<label> 12.3 ms (x 0.3)": the label of a ratio in parentheses is the text before the figure
_BEFORE = re.compile(r"(?:^|\s{2})([A-Za-z][A-Za-z +./-]*?)\s+-?\d+(?:\.\d+)?\s*(?:ms|s|MiB/s|fps)?\s*$")


def ratios_of(line: str) -> list[str]:
    found = []
    for match in _PAREN_RATIO.finditer(line):
        inside, value = match.group(1).strip(), match.group(2)
        if inside:
            found.append(f"{inside} x{value}")
            continue
        before = _BEFORE.search(line[: match.start()])
        found.append(f"{before.group(1).strip() if before else ''} x{value}".strip())
    if not found:
        found = [f"x{m.group(1)}" for m in _TRAILING_RATIO.finditer(line)]
    if not found:
        found = [f"{m.group(1)} x{m.group(2)}" for m in _NAMED_RATIO.finditer(line)]
    return found


def label_of(line: str, section: str) -> str:
    text = line.strip()
    if " deskctl " in text:  # "<label> deskctl 12.3 ms ...": the label may have columns of its own
        head = " ".join(text.split(" deskctl ", 1)[0].split())
    else:
        head = re.split(r"\s{2,}", text, maxsplit=1)[0].strip()
    return f"{section}: {head}" if section and head else head or section


def run(name: str, quick: bool, timeout: float) -> tuple[list[tuple[str, str]], str | None, float]:
    argv = [sys.executable, str(HERE / f"bench_{name}.py"), *(QUICK.get(name, []) if quick else [])]
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"did not finish within {timeout:.0f} s", time.perf_counter() - started
    took = time.perf_counter() - started
    rows: list[tuple[str, str]] = []
    section = ""
    for line in done.stdout.splitlines():
        if line and not line[0].isspace() and not ratios_of(line):
            section = line.split(":")[0].split("(")[0].strip()[:40]
        found = ratios_of(line)
        if found:
            rows.append((label_of(line, section if line[:1].isspace() else ""), "; ".join(found)))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return rows, f"exit {done.returncode}: {last[:150]}", took
    return rows, None, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds per benchmark")
    parser.add_argument("--only", help="comma-separated names (cli,fleet,...: bench_NAME.py)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    args = parser.parse_args()
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    table: list[tuple[str, str, str]] = []
    problems: list[tuple[str, str]] = []
    for name in names:
        print(f"running bench_{name}.py{' --quick' if args.quick else ''} ...", file=sys.stderr, flush=True)
        rows, problem, took = run(name, args.quick, args.timeout)
        print(f"  {took:.0f} s, {len(rows)} ratios" + (f"; {problem}" if problem else ""), file=sys.stderr)
        table += [(name, label, ratios) for label, ratios in rows]
        if problem:
            problems.append((name, problem))
    table = [(name, label if len(label) <= 60 else label[:57] + "...", ratios) for name, label, ratios in table]
    width = max([len(label) for _, label, _ in table] + [10])
    import os

    print(f"bench/run_all.py{' --quick' if args.quick else ''}: {len(names) - len(problems)} of {len(names)} "
          f"benchmarks ran to the end; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"| bench | row{' ' * (width - 3)} | ratios (naive or reference / deskctl unless named) |")
    print(f"|---|{'-' * (width + 2)}|---|")
    for name, label, ratios in table:
        print(f"| {name} | {label:<{width}} | {ratios} |")
    for name, problem in problems:
        print(f"| {name} | {'(not run to the end)':<{width}} | {problem} |")


if __name__ == "__main__":
    main()
