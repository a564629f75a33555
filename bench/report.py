"""Writes the results part of docs/BENCHMARKS.md from one run's figures:
what `make bench` ends with.

    .deps/py/bin/python bench/report.py [--out docs/BENCHMARKS.md] [--plots docs/bench]

It reads what the benchmark scripts wrote under out/bench (bench/sizes.py's
results.json, bench/serve_bench.py's for the 1B model and SmolLM2, and
bench/hybrid.py's tables) and replaces the text between the two marker lines
of --out with: the machine and the run, each goal of the speed work marked
held or missed with the figures that decide it (or "not measured" where the
run left a row out, as the quick mode does), the tables per size and format,
and plots as SVG files in --plots (tok/s by size and engine for decode and
prefill, by streams for the server, by depth for long context). Everything
outside the markers is kept as written.
"""

import argparse
import datetime
import html
import json
import os
import sys
from pathlib import Path

from sizes import FOUR_BIT_GGUF, LONG_GGUF  # noqa: E402  (bench/ is the script's directory)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "out/bench"  # --results
BEGIN = "<!-- results: written by bench/report.py from one run of make bench; do not edit by hand -->"
END = "<!-- end of results -->"


def load(path):
    return json.loads(path.read_text()) if path.exists() else None


def fx(x, digits=2):
    return f"{x:.{digits}f}x"


def goals(sizes, serve1b):
    """[(goal, verdict, figures)] for each goal the issue sets."""
    out = []
    rows = (sizes or {}).get("sizes", {})

    def best4(r):
        tg = [(r[n]["llama.cpp"]["tg128"], n) for n in FOUR_BIT_GGUF if n in r and "llama.cpp" in r[n]]
        return max(tg) if tg else (None, None)

    for size, want in (("1b", 1.5), ("3b", 1.2), ("8b", 1.2)):
        r = rows.get(size, {}).get("rows")
        b, bname = best4(r) if r else (None, None)
        if not r or not b:
            out.append((f"Decode at {size}: >= {want}x llama.cpp's best 4-bit", "not measured", "-"))
            continue
        for name in ("mlx 4-bit g64", *FOUR_BIT_GGUF):
            if name in r:
                q = r[name]["archgen"]["tg128"] / b
                out.append((f"Decode at {size}, archgen {name}: >= {want}x llama.cpp's best 4-bit ({bname})",
                            "held" if q >= want else "missed",
                            f"{r[name]['archgen']['tg128']:.1f} vs {b:.1f} tok/s: {fx(q)}"))
    for size, r in rows.items():
        r = r["rows"]
        q8 = r.get("GGUF Q8_0", {}).get("llama.cpp")
        if not q8:
            continue
        for name in ("mlx 8-bit g64", "GGUF Q8_0"):
            if name in r:
                q = r[name]["archgen"]["tg128"] / q8["tg128"]
                out.append((f"Decode at {size}, archgen {name}: >= 1.2x llama.cpp's Q8_0", "held" if q >= 1.2 else "missed",
                            f"{r[name]['archgen']['tg128']:.1f} vs {q8['tg128']:.1f} tok/s: {fx(q)}"))
    for size, r in rows.items():
        for name, v in r["rows"].items():
            ll = v.get("llama.cpp")
            if ll:
                q = v["archgen"]["pp512"] / ll["pp512"]
                out.append((f"Prefill 512 at {size}, {name}: >= 1.5x llama-bench", "held" if q >= 1.5 else "missed",
                            f"{v['archgen']['pp512']:.1f} vs {ll['pp512']:.1f} tok/s: {fx(q)}"))
    long = (sizes or {}).get("long", {})
    if not long:
        out.append(("Long context: 8k prefill >= 1.0x, decode at 8k and 32k >= 1.0x llama-bench with -fa",
                    "not measured", "-"))
    for size, lr in long.items():
        ll = (lr.get("llama.cpp") or {}).get("-fa on")
        if not ll:
            continue
        for name, a in lr["archgen"].items():
            for key, label in (("pp8192", "8k prefill"), ("tg128@8192", "decode after 8k"),
                               ("tg128@32768", "decode after 32k")):
                if ll.get(key) and a.get(key):
                    q = a[key] / ll[key]
                    out.append((f"{label} at {size}, archgen {name}: >= 1.0x llama-bench -fa on ({LONG_GGUF})",
                                "held" if q >= 1.0 else "missed", f"{a[key]:.1f} vs {ll[key]:.1f} tok/s: {fx(q)}"))
    srv = (serve1b or {}).get("servers", {})
    a, ll = srv.get("archgen"), srv.get("llama.cpp")
    for c in ("16", "64"):
        if not (a and ll and c in a["rows"] and c in ll["rows"]):
            out.append((f"Server at {c} streams: >= 1.5x llama-server, TTFT p50 <= llama-server's", "not measured", "-"))
            continue
        ra, rl = a["rows"][c], ll["rows"][c]
        q = ra["tok_s"] / rl["tok_s"]
        out.append((f"Server at {c} streams (1B 4-bit): >= 1.5x llama-server's aggregate", "held" if q >= 1.5 else "missed",
                    f"{ra['tok_s']:.1f} vs {rl['tok_s']:.1f} tok/s: {fx(q)}"))
        out.append((f"Server at {c} streams (1B 4-bit): TTFT p50 <= llama-server's",
                    "held" if ra["ttft_p50_s"] <= rl["ttft_p50_s"] else "missed",
                    f"{ra['ttft_p50_s']:.2f} vs {rl['ttft_p50_s']:.2f} s"))
    worse = []
    n = 0
    for size, r in rows.items():
        for name, v in r["rows"].items():
            ll = v.get("llama.cpp")
            if ll:
                n += 1
                if v["archgen"]["peak_rss"] > ll["peak_rss"]:
                    worse.append(f"{size} {name} ({v['archgen']['peak_rss'] >> 20} vs {ll['peak_rss'] >> 20} MiB)")
    if n:
        out.append(("Peak resident memory <= llama.cpp's on every row", "missed" if worse else "held",
                    ("over on " + ", ".join(worse)) if worse else f"all {n} rows"))
    flags = (sizes or {}).get("flags", {})
    if not flags:
        out.append(("No row where the default is more than 10% slower than the best setting", "not measured", "-"))
    for size, fl in flags.items():
        slow = []
        for name, settings in fl.items():
            d = settings["default"]
            for key in ("tg128", "pp512"):
                best = max(v[key] for v in settings.values())
                if d[key] < 0.9 * best:
                    who = max(settings, key=lambda s: settings[s][key])
                    slow.append(f"{name} {key}: {who} {best:.1f} vs default {d[key]:.1f}")
        out.append((f"No row at {size} where the default is more than 10% slower than the best setting",
                    "missed" if slow else "held", "; ".join(slow) if slow else
                    f"{len(fl)} formats x {len(next(iter(fl.values())))} settings"))
    return out


# --- plots: small SVG charts, written here so that the report needs no
# plotting package

PALETTE = ["#1f5fa8", "#d9822b", "#3a9a4a", "#b3403a", "#7b5ea7", "#8c6d46", "#c76fb0", "#6b6b6b"]


def bars(title, unit, groups, series, values, path):
    """A grouped bar chart: values[(group, series)] -> number or None."""
    w_bar, gap = 14, 18
    width = max(520, 70 + len(groups) * (len(series) * w_bar + gap) + 20)
    height, top, bottom, left = 320, 40, 70, 60
    vmax = max([v for v in values.values() if v] or [1]) * 1.1
    y = lambda v: top + (height - top - bottom) * (1 - v / vmax)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 20 * len(series)}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="20" font-size="14">{html.escape(title)}</text>']
    for k in range(6):
        v = vmax * k / 5
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="12" y="{top - 8}" >{html.escape(unit)}</text>')
    x = left + gap / 2
    for g in groups:
        x0 = x
        for i, s in enumerate(series):
            v = values.get((g, s))
            if v:
                out.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{w_bar - 2}" height="{y(0) - y(v):.1f}" '
                           f'fill="{PALETTE[i % len(PALETTE)]}"><title>{html.escape(f"{g}, {s}: {v:.1f}")}</title></rect>')
            x += w_bar
        out.append(f'<text x="{(x0 + x) / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle">{html.escape(g)}</text>')
        x += gap
    for i, s in enumerate(series):
        ly = height - bottom + 36 + 18 * i
        out.append(f'<rect x="{left}" y="{ly - 10}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(f'<text x="{left + 18}" y="{ly}">{html.escape(s)}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def plots(sizes, serve1b, plot_dir, rel):
    """Writes the SVG plots; returns the markdown that shows them."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    md = []
    rows = (sizes or {}).get("sizes", {})
    if rows:
        groups = list(rows)
        series = []
        for size in groups:
            for name, v in rows[size]["rows"].items():
                for engine in ("archgen", "llama.cpp"):
                    if engine in v and f"{engine}, {name}" not in series:
                        series.append(f"{engine}, {name}")
        for key, what in (("tg128", "decode (tg128)"), ("pp512", "prefill (pp512)")):
            vals = {}
            for size in groups:
                for name, v in rows[size]["rows"].items():
                    for engine in ("archgen", "llama.cpp"):
                        if engine in v:
                            vals[(size, f"{engine}, {name}")] = v[engine][key]
            f = plot_dir / f"{key}.svg"
            bars(f"{what} by size, engine and format, 2 threads", "tok/s", groups, series, vals, f)
            md.append(f"![{what}]({rel}/{f.name})")
    srv = (serve1b or {}).get("servers", {})
    if srv:
        streams = [str(c) for c in serve1b["streams"]]
        vals = {(c, n): srv[n]["rows"][c]["tok_s"] for n in srv for c in streams if c in srv[n]["rows"]}
        f = plot_dir / "server.svg"
        bars("server, 1B 4-bit: aggregate tok/s by concurrent streams", "tok/s", [f"{c} streams" for c in streams],
             list(srv), {(f"{c} streams", n): v for (c, n), v in vals.items()}, f)
        md.append(f"![server]({rel}/{f.name})")
    long = (sizes or {}).get("long", {})
    for size, lr in long.items():
        if not lr.get("llama.cpp"):
            continue
        keys = [("pp8192", "pp8192"), ("tg128@8192", "tg128 after 8k"), ("tg128@32768", "tg128 after 32k")]
        series = [f"archgen, {n}" for n in lr["archgen"]] + [f"llama.cpp, {fa}" for fa in lr["llama.cpp"]]
        vals = {}
        for key, label in keys:
            for n, a in lr["archgen"].items():
                vals[(label, f"archgen, {n}")] = a.get(key)
            for fa, r in lr["llama.cpp"].items():
                vals[(label, f"llama.cpp, {fa}")] = r.get(key)
        f = plot_dir / f"long-{size}.svg"
        bars(f"long context at {size}: tok/s", "tok/s", [label for _, label in keys], series, vals, f)
        md.append(f"![long context]({rel}/{f.name})")
    return "\n\n".join(md)


def section(sizes, serve1b, serve_small, hybrid_md, plot_md):
    m = (sizes or {}).get("machine", {})
    lines = [BEGIN, "", "## Results", ""]
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    # Every command whose rows the results hold (a --merge run keeps the
    # rows and commands of the runs before it).
    cmds = [c for d in (sizes, serve1b, serve_small) if d
            for c in (d.get("commands") or ([d["command"]] if d.get("command") else []))]
    made = ("; ".join(f"`{c}`" for c in cmds)) if cmds else f"`make bench{' BENCH_QUICK=1' if quick else ''}`"
    lines.append(f"Written {datetime.date.today().isoformat()} from the figures of {made}, on "
                 f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores), {(sizes or {}).get('runs', '?')} measured "
                 "runs per row after a warm-up; archgen at its defaults (float32 compute on the CPU), llama.cpp's "
                 "own tools at theirs with 2 threads. Rows this run did not measure are marked so.")
    lines += ["", "### The goals", "", "| goal | verdict | figures |", "|---|---|---|"]
    for g, v, f in goals(sizes, serve1b):
        lines.append(f"| {g} | **{v}** | {f} |")
    lines += ["", "Why each missed goal misses, as measured, is under [Where the goals miss](#where-the-goals-miss).", ""]
    if plot_md:
        lines += ["### Plots", "", plot_md, ""]
    tables = RESULTS / "sizes/tables.md"
    if tables.exists():
        lines += ["### At the sizes people run (`make bench-sizes`)", "",
                  tables.read_text().replace("\n### ", "\n#### ").replace("### ", "#### ", 1), ""]
    for data, name in ((serve1b, "1B 4-bit"), (serve_small, "SmolLM2-135M")):
        t = RESULTS / f"{'serve-1b' if data is serve1b else 'serve'}/tables.md"
        if data and t.exists():
            lines += [f"### Servers, {name} (`make bench-serve`)", "", t.read_text().strip(), ""]
    if hybrid_md:
        lines += ["### Hybrid models (`make bench-hybrid`)", "", hybrid_md.strip(), ""]
    lines += [END]
    return "\n".join(lines)


def main():
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs/BENCHMARKS.md")
    ap.add_argument("--plots", type=Path, default=ROOT / "docs/bench")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the benchmarks wrote their figures")
    args = ap.parse_args()
    RESULTS = args.results
    sizes = load(RESULTS / "sizes/results.json")
    serve1b = load(RESULTS / "serve-1b/results.json")
    serve_small = load(RESULTS / "serve/results.json")
    hyb = RESULTS / "hybrid/tables.md"
    hybrid_md = hyb.read_text() if hyb.exists() else None
    if sizes is None:
        sys.exit(f"report: {RESULTS}/sizes/results.json is missing: run make bench (or make bench-sizes) first")
    rel = Path("bench") if args.plots.parent == args.out.parent else args.plots
    text = section(sizes, serve1b, serve_small, hybrid_md, plots(sizes, serve1b, args.plots, rel))
    doc = args.out.read_text() if args.out.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        sys.exit(f"report: {args.out} has no marker lines ({BEGIN!r} ... {END!r})")
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    args.out.write_text(head + text + tail)
    print(f"report: wrote {args.out} and the plots in {args.plots}", file=sys.stderr)


if __name__ == "__main__":
    main()
