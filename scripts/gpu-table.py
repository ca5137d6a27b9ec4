#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The markdown tables of a scripts/gpu-checks.sh run, from its log folder.

    python3 scripts/gpu-table.py <log-dir>                       # to stdout
    python3 scripts/gpu-table.py <log-dir> --docs docs/gpu.md    # also into that file
    DOCS=docs/gpu.md python3 scripts/gpu-table.py <log-dir>      # the same

It reads <log-dir>/steps.tsv (one line per run), the runs' logs (dsp-bench's
text tables, doctest's summaries), machine.txt (nvidia-smi) and total.txt.
The header names the card, driver, CUDA and NCCL; then one table of the tests
and one of the timings, a row per step, op and size: the old (baseline) and
new (tuned) kernels' rates (the kernel sets OLD and NEW of the environment,
default baseline and tuned; gpu-checks.sh passes its first and last), each as a ratio to cudaMemcpyAsync of the same
nominal size in the same run (from the same process where it ran a memcpy
table, else the memcpy step), new over old, the issue's target where it has
one, and #wrong. A kernel timed on bytes read plus written (the wire kernels)
is divided by twice memcpy's rate, since a copy reads and writes each byte.
With --docs FILE (or DOCS=FILE) the text between <!-- gpu-checks:begin -->
and <!-- gpu-checks:end --> in FILE is replaced by the tables.

Python 3.8 or newer, standard library only.
"""

import math
import os
import re
import shlex
import sys

BEGIN = "<!-- gpu-checks:begin -->"
END = "<!-- gpu-checks:end -->"


def parse_size(text):
    """dsp-bench's sizes: a number with an optional K, M or G suffix (1K = 1024)."""
    m = re.fullmatch(r"([0-9.]+)([KkMmGg]?)", text)
    if not m:
        raise ValueError("not a size: " + text)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def nominal_sizes(argv):
    """The sizes dsp-bench steps through for a command line (its step_sizes)."""
    lo, hi, factor, step = 32, 32 << 20, 2.0, 0
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a in ("-b", "--minbytes"):
            lo = parse_size(nxt)
        elif a in ("-e", "--maxbytes"):
            hi = parse_size(nxt)
        elif a in ("-f", "--stepfactor"):
            factor = float(nxt)
        elif a in ("-i", "--stepbytes"):
            step = parse_size(nxt)
        i += 1
    sizes, b = [], lo
    while len(sizes) <= 1000:
        sizes.append(b)
        nb = b + step if step > 0 else max(b + 1, int(b * factor))
        if nb > hi:
            break
        b = nb
    return sizes


def size_text(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


class Table:
    """One dsp-bench table: its op, what its header says, and its rows."""

    def __init__(self, op, header):
        self.op = op
        self.header = header
        self.lines = [header]
        self.rows = []  # dicts: size, count, type, time_us, algbw, wrong

    def says(self, text):
        return any(text in line for line in self.lines)

    @property
    def traffic(self):  # a kernel timed on bytes read plus written
        return self.says("bytes it reads plus the bytes it writes")

    @property
    def wire(self):
        for line in self.lines:
            m = re.search(r"the (\S+) wire (?:pack|unpack) kernel|on wire (\S+)", line)
            if m:
                return m.group(1) or m.group(2)
        return ""


def parse_log(path):
    """dsp-bench's text tables in a log, and its -B nccl header line."""
    tables, about = [], ""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return tables, about
    for line in text.splitlines():
        if line.startswith("# dsp-bench: "):
            tables.append(Table(line[len("# dsp-bench: "):].split(",")[0], line))
        elif line.startswith("# backend nccl:"):
            about = line
        elif line.startswith("#") and tables:
            tables[-1].lines.append(line)
        elif tables and line.strip():
            f = line.split()
            if len(f) >= 7 and f[0].isdigit():
                try:
                    tables[-1].rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2],
                                            "time_us": float(f[3]), "algbw": float(f[4]), "wrong": int(f[6])})
                except ValueError:
                    pass
    return tables, about


def doctest_summary(path):
    """doctest's last 'test cases' and 'assertions' lines, as one phrase."""
    cases = asserts = None
    try:
        for line in open(path, encoding="utf-8", errors="replace"):
            if line.startswith("[doctest] test cases:"):
                cases = [int(n) for n in re.findall(r"\d+", line)]
            elif line.startswith("[doctest] assertions:"):
                asserts = [int(n) for n in re.findall(r"\d+", line)]
    except OSError:
        pass
    if not cases or len(cases) < 3:
        return ""
    text = "%d cases, %d failed" % (cases[0], cases[2])
    if len(cases) >= 4 and cases[3]:
        text += ", %d skipped" % cases[3]
    if asserts and len(asserts) >= 3:
        text += "; %d assertions, %d failed" % (asserts[0], asserts[2])
    return text


def last_line(path):
    """What a failed run's log says last: the last line naming an error, else the last line
    that is not decoration (Open MPI frames its messages in lines of dashes)."""
    try:
        lines = [l.strip() for l in open(path, encoding="utf-8", errors="replace")]
    except OSError:
        return "(no log)"
    lines = [l for l in lines[1:] if re.search(r"[A-Za-z0-9]", l)]  # the first line is the command
    for l in reversed(lines):
        if re.search(r"error|fail|abort|not found|cannot|refused|killed|timed out", l, re.I):
            return l
    return lines[-1] if lines else "(no output)"


def read_steps(logs):
    path = os.path.join(logs, "steps.tsv")
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        sys.exit("gpu-table.py: no %s (not a gpu-checks.sh log folder?)" % path)
    head = lines[0].split("\t") if lines else []
    steps = []
    for line in lines[1:]:
        f = line.split("\t")
        if len(f) == len(head):
            steps.append(dict(zip(head, f)))
    return steps


def target_of(table, row, nominal):
    """The issue's target for a row: the least ratio to memcpy, or None."""
    op, t = table.op, row["type"]
    if table.traffic:
        w = table.wire
        if w in ("bf16", "fp16"):
            return 0.80
        if w == "fp8_e4m3":
            return 0.70
        return None
    if op in ("pack", "unpack") and t in ("float", "bf16", "int8"):
        return 0.90
    if (op.startswith("switch") and table.says(", 1 ranks,") and not table.wire and not table.says("batch of")
            and not table.says("CUDA graph") and nominal >= (256 << 20)):
        return 0.95
    return None


def fmt_rate(row, nominal):
    if row is None:
        return "—"
    if nominal >= (16 << 20):
        return "%.0f GB/s" % row["algbw"]
    return "%.1f us" % row["time_us"]


def fmt_ratio(x):
    return "—" if x is None or not math.isfinite(x) else "%.2f" % x


def main(argv):
    docs = os.environ.get("DOCS", "")
    args = []
    i = 1
    while i < len(argv):
        if argv[i] == "--docs" and i + 1 < len(argv):
            docs = argv[i + 1]
            i += 2
            continue
        if argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        args.append(argv[i])
        i += 1
    if len(args) != 1:
        sys.stderr.write("usage: gpu-table.py <log-dir> [--docs FILE]\n")
        return 2
    logs = args[0]
    steps = read_steps(logs)

    # The machine: nvidia-smi -L's first GPU, the driver from its query; CUDA and
    # NCCL from dsp-bench's -B nccl header line.
    card, driver, when = "unknown GPU (no nvidia-smi -L in machine.txt)", "unknown", ""
    try:
        machine = open(os.path.join(logs, "machine.txt"), encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        machine = []
    for k, line in enumerate(machine):
        if k == 0 and re.match(r"\d{4}-\d\d-\d\d", line):
            when = line.strip()
        if line.startswith("GPU 0:"):
            card = re.sub(r"\s*\(UUID:[^)]*\)", "", line[len("GPU 0:"):]).strip()
        m = re.match(r"[^,]+,\s*([0-9.]+),", line)
        if m and driver == "unknown":
            driver = m.group(1)
    total = ""
    try:
        t = open(os.path.join(logs, "total.txt"), encoding="utf-8").read().split()
        total = "%s s of a %s s budget (estimated %s s)" % (t[0], t[1], t[2])
    except (OSError, IndexError):
        pass

    # Every run's tables; the memcpy reference by nominal size.
    about = ""
    parsed = {}
    for s in steps:
        if s["rc"] == "skipped":
            continue
        tables, a = parse_log(os.path.join(logs, s["log"]))
        about = about or a
        parsed[(s["name"], s["kernels"])] = (tables, nominal_sizes(shlex.split(s["command"])))
    reference = {}  # nominal size -> memcpy algbw (the memcpy step)
    for (name, _), (tables, sizes) in parsed.items():
        if name == "memcpy":
            for t in tables:
                if t.op == "memcpy":
                    for k, r in enumerate(t.rows):
                        if k < len(sizes):
                            reference[sizes[k]] = r["algbw"]

    def memcpy_rate(tables, sizes, k):
        for t in tables:  # the same process's memcpy table first
            if t.op == "memcpy" and k < len(t.rows):
                return t.rows[k]["algbw"]
        return reference.get(sizes[k]) if k < len(sizes) else None

    nccl = cuda = "unknown"
    m = re.search(r"NCCL ([0-9.]+) \(loaded: (\d+)\)", about)
    if m:
        loaded = int(m.group(2))
        nccl = "%s headers, %d.%d.%d loaded" % (m.group(1), loaded // 10000, loaded // 100 % 100, loaded % 100)
    m = re.search(r"CUDA driver ([0-9.]+), runtime ([0-9.]+)", about)
    if m:
        cuda = "%s (driver API %s)" % (m.group(2), m.group(1))

    out = []
    out.append("Device run%s: **%s**, driver %s, CUDA runtime %s, NCCL %s. `scripts/gpu-checks.sh`: %s; %d runs, "
               "%d failed, %d skipped for the budget. Tables made by `scripts/gpu-table.py` from its logs."
               % (" of " + when if when else "", card, driver, cuda, nccl, total or "total unknown", len(steps),
                  sum(1 for s in steps if s["rc"] not in ("0", "skipped")),
                  sum(1 for s in steps if s["rc"] == "skipped")))
    out.append("")
    out.append("| test | result | seconds | doctest |")
    out.append("|---|---|---|---|")
    for s in steps:
        if s["kind"] != "test":
            continue
        log = os.path.join(logs, s["log"])
        result = {"0": "passed", "skipped": "skipped (budget)"}.get(s["rc"], "**failed** (exit %s)" % s["rc"])
        if s["rc"] == "77":
            result = "skipped (77)"
        summary = doctest_summary(log) if s["rc"] != "skipped" else ""
        if not summary and s["rc"] not in ("0", "skipped"):
            summary = last_line(log).replace("|", "\\|")[:120]
        out.append("| `%s` | %s | %s | %s |" % (s["name"], result, s["seconds"], summary))
    out.append("")
    out.append("Timings: one rank, NCCL, tensors in `CudaSpace`, median of the iterations, each ended by a stream "
               "synchronisation. old: kernel set `" + OLD + "`, new: `" + NEW + "` (`tuned@KNOBS`: "
               "DSP_DEVICE_TUNING=KNOBS), run back to back. GB/s from "
               "16 MiB up (algbw: each byte once; the wire kernels: bytes read plus written), us per call below. "
               "/ memcpy: the rate over `cudaMemcpyAsync` device to device of the same nominal size in the same "
               "run (the wire kernels over twice its rate). new / old: the speed-up. #wrong: old / new (`-`: not "
               "checked).")
    out.append("")
    out.append("| step | op | size | old | new | old / memcpy | new / memcpy | new / old | target (new) | #wrong |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    seen = []
    for s in steps:
        if s["kind"] != "time" or s["name"] in seen:
            continue
        seen.append(s["name"])
        runs = {s2["kernels"]: s2 for s2 in steps if s2["name"] == s["name"]}
        if all(r["rc"] == "skipped" for r in runs.values()):
            out.append("| `%s` | | | skipped (budget) | | | | | | |" % s["name"])
            continue
        bad = ["%s exit %s" % (k, r["rc"]) for k, r in runs.items() if r["rc"] not in ("0", "skipped")]
        if bad:
            out.append("| `%s` | **failed**: %s (see below) | | | | | | | | |" % (s["name"], "; ".join(bad)))
        old = parsed.get((s["name"], OLD))
        new = parsed.get((s["name"], NEW)) or parsed.get((s["name"], "-"))
        base = new or old
        if base is None:
            continue
        sizes = base[1]
        for ti, table in enumerate(base[0]):
            for k, row in enumerate(table.rows):
                nominal = sizes[k] if k < len(sizes) else row["size"]

                def pick(run):
                    """The row of this table and size in one kernel set's run, and its ratio to memcpy."""
                    if run is None or ti >= len(run[0]) or k >= len(run[0][ti].rows):
                        return None, None
                    r = run[0][ti].rows[k]
                    if table.op == "memcpy":  # the reference itself; a later memcpy step against the first
                        ref = reference.get(nominal) if s["name"] != "memcpy" and len(run[0]) == 1 else None
                    else:
                        ref = memcpy_rate(run[0], run[1], k)
                    if not ref:
                        return r, None
                    return r, r["algbw"] / (2 * ref if table.traffic else ref)

                r_old, q_old = pick(old) if old is not None and old is not new else (None, None)
                r_new, q_new = pick(new)
                speed = None
                if r_old and r_new and r_new["time_us"] > 0:
                    speed = r_old["time_us"] / r_new["time_us"]
                target = target_of(table, row, nominal)
                tgt = "—"
                if target is not None and q_new is not None:
                    tgt = ("%.2f: yes" if q_new >= target else "%.2f: **no**") % target
                elif target is not None:
                    tgt = "%.2f" % target

                def wrong(r):
                    return "?" if r is None else ("-" if r["wrong"] < 0 else str(r["wrong"]))

                what = []
                if table.op != "memcpy" and row["type"] != "float":
                    what.append(row["type"])
                if table.wire:
                    what.append("%s wire" % table.wire)
                if table.says("batch of"):
                    what.append("batch of 3")
                if table.op.startswith("switch"):
                    if "(first_call)" in table.header:
                        what.append("first_call")
                    elif "agreement check off" in table.header:
                        what.append("no agreement check")
                if table.says("CUDA graph"):
                    what.append("CUDA graph")
                op = table.op + (" (" + ", ".join(what) + ")" if what else "")
                out.append("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    s["name"], op, size_text(nominal), fmt_rate(r_old, nominal), fmt_rate(r_new, nominal),
                    fmt_ratio(q_old), fmt_ratio(q_new), fmt_ratio(speed), tgt,
                    wrong(r_old) + " / " + wrong(r_new) if old is not None and old is not new else wrong(r_new)))
    # More than two kernel sets (a sweep of tuning knobs): every set's ratio to memcpy, side by side.
    sets = []
    for s in steps:
        if s["kind"] == "time" and s["kernels"] != "-" and s["kernels"] not in sets:
            sets.append(s["kernels"])
    if len(sets) > 2:
        out.append("")
        out.append("Every kernel set, as a ratio to `cudaMemcpyAsync` of the same size in the same run (the "
                   "wire kernels over twice its rate); the best of each row in bold.")
        out.append("")
        out.append("| step | op | size | " + " | ".join("`%s`" % k for k in sets) + " |")
        out.append("|---|---|---|" + "---|" * len(sets))
        done = []
        for s in steps:
            if s["kind"] != "time" or s["kernels"] == "-" or s["name"] in done:
                continue
            done.append(s["name"])
            runs = [parsed.get((s["name"], k)) for k in sets]
            base = next((r for r in runs if r is not None), None)
            if base is None:
                continue
            for ti, table in enumerate(base[0]):
                if table.op == "memcpy" or table.op.startswith("nccl"):
                    continue
                for k, row in enumerate(table.rows):
                    ratios = []
                    for run in runs:
                        q = None
                        if run is not None and ti < len(run[0]) and k < len(run[0][ti].rows):
                            ref = memcpy_rate(run[0], run[1], k)
                            if ref:
                                q = run[0][ti].rows[k]["algbw"] / (2 * ref if table.traffic else ref)
                        ratios.append(q)
                    best = max((q for q in ratios if q is not None), default=None)
                    cells = [("**%s**" if q == best else "%s") % fmt_ratio(q) if q is not None else "—"
                             for q in ratios]
                    nominal = base[1][k] if k < len(base[1]) else row["size"]
                    op = table.op + (" (%s wire)" % table.wire if table.wire else "")
                    out.append("| `%s` | %s | %s | %s |" % (s["name"], op, size_text(nominal), " | ".join(cells)))
    failed = [s for s in steps if s["rc"] not in ("0", "skipped")]
    if failed:
        out.append("")
        out.append("Runs that failed (the last line of each log):")
        out.append("")
        for s in failed:
            out.append("- `%s` (%s), exit %s, `%s`: %s" % (s["name"], s["kernels"], s["rc"], s["log"],
                                                           last_line(os.path.join(logs, s["log"]))))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)

    if docs:
        try:
            doc = open(docs, encoding="utf-8").read()
        except OSError as e:
            sys.stderr.write("gpu-table.py: cannot read %s: %s\n" % (docs, e))
            return 1
        a, b = doc.find(BEGIN), doc.find(END)
        if a < 0 or b < a or doc.count(BEGIN) != 1 or doc.count(END) != 1:
            sys.stderr.write("gpu-table.py: %s needs one %s followed by one %s\n" % (docs, BEGIN, END))
            return 1
        doc = doc[:a + len(BEGIN)] + "\n" + text + doc[b:]
        with open(docs, "w", encoding="utf-8") as f:
            f.write(doc)
        sys.stderr.write("gpu-table.py: replaced the block between the gpu-checks markers in %s\n" % docs)
    return 0


if __name__ == "__main__":
    OLD = os.environ.get("OLD", "baseline")
    NEW = os.environ.get("NEW", "tuned")
    sys.exit(main(sys.argv))
