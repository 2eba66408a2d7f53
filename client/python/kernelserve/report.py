"""Pictures and reports of benchmark jobs, from their JSON (needs only NumPy and matplotlib).

This module imports nothing else from the package, so kernelctl can run it as a
plain script with /usr/bin/python3 (`kernelctl export --plot=FILE.png`):

  python3 report.py --json=jobs.json --plot=jobs.png [--html=report.html]

where jobs.json is `kernelctl export --format=json` output ({"jobs": [...]}, the
proto's field names). In the package, Job.plot() and Job.html_report() call it.

A job's figure has five panels per job: time per variant (value_ms with the
standard deviation as error bars, min..max as a thin range); the achieved rate
against the device's measured ceiling (TFLOP/s against the GEMM ceiling, or
TB/s against the copy ceiling, whichever the op is nearer to); the roofline
(achieved TFLOP/s over arithmetic intensity with the ceilings min(GEMM,
copy x FLOP/byte)); the correctness gate (relative RMS error against the fp64
oracle next to the tolerance, log scale, red when failed); and the clocks
sampled over a sustained window (SM MHz mean with its min..max, power) where
the job measured them, or the reason it did not.
"""
import argparse
import base64
import html
import io
import json
import re
import sys

# int64 fields, which proto3 JSON writes as strings.
_INT_KEYS = {"count", "samples", "created_unix_ms", "started_unix_ms", "finished_unix_ms", "measured_unix_ms",
             "nonfinite", "seed", "seq", "time_unix_ms", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim",
             "head_dim_v", "q_len", "heads", "seq_len", "num_splits", "page_size", "tokens", "experts", "top_k",
             "hidden", "inter", "out_dim", "num_slots", "rows_written", "row_elements", "shape"}
_PASS, _FAIL, _UNTIMED = "#2e7d32", "#c62828", "#9e9e9e"


def _snake(key):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def normalize(value, key=""):
    """JSON of a job (camelCase or proto names) -> snake_case keys, int64 strings as ints, NaN strings as floats."""
    if isinstance(value, dict):
        return {_snake(k): normalize(v, _snake(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, key) for v in value]
    if isinstance(value, str):
        if value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        if (key in _INT_KEYS or key.endswith("_bytes")) and re.fullmatch(r"-?\d+", value):
            return int(value)
    return value


def _op(job):
    return str(job.get("spec", {}).get("op", "")).replace("OP_", "").lower()


def records(job):
    """One flat dict per variant of a job (dict from to_dict or export JSON): pandas.DataFrame(records)."""
    job = normalize(job)
    out = []
    ceil = job.get("ceilings", {}) or {}
    for r in job.get("results", []):
        t, e, c = r.get("time", {}) or {}, r.get("error", {}) or {}, r.get("clocks", {}) or {}
        out.append({
            "job_id": job.get("id", ""), "name": job.get("spec", {}).get("name", ""), "op": _op(job),
            "shape": job.get("shape_desc", ""), "state": str(job.get("state", "")).replace("JOB_", "").lower(),
            "variant": r.get("variant", ""), "backend": r.get("backend", "") or job.get("backend", ""),
            "device_name": job.get("device_name", ""), "method": r.get("method", ""),
            "correct": bool(r.get("correct", False)), "gate_message": r.get("gate_message", ""),
            "rel_rms": float(e.get("rel_rms", 0.0)), "max_abs": float(e.get("max_abs", 0.0)),
            "nonfinite": int(e.get("nonfinite", 0)), "tolerance": float(r.get("tolerance", 0.0)),
            "timed": bool(r.get("timed", False)),
            "value_ms": float(t.get("value_ms", 0.0)), "mean_ms": float(t.get("mean_ms", 0.0)),
            "median_ms": float(t.get("median_ms", 0.0)), "min_ms": float(t.get("min_ms", 0.0)),
            "max_ms": float(t.get("max_ms", 0.0)), "stddev_ms": float(t.get("stddev_ms", 0.0)),
            "count": int(t.get("count", 0)),
            "flops": float(r.get("flops", 0.0)), "bytes": float(r.get("bytes", 0.0)),
            "tflops": float(r.get("tflops", 0.0)), "tbps": float(r.get("tbps", 0.0)),
            "frac_gemm_ceiling": float(r.get("frac_gemm_ceiling", 0.0)),
            "frac_copy_ceiling": float(r.get("frac_copy_ceiling", 0.0)),
            "gemm_ceiling_tflops": float(ceil.get("gemm_tflops", 0.0)),
            "copy_ceiling_tbps": float(ceil.get("copy_tbps", 0.0)),
            "rank": int(r.get("rank", 0)), "speedup_vs_first": float(r.get("speedup_vs_first", 0.0)),
            "clocks_available": bool(c.get("available", False)), "clocks_note": c.get("note", ""),
            "sm_clock_mhz_mean": float(c.get("sm_clock_mhz_mean", 0.0)),
            "sm_clock_mhz_min": float(c.get("sm_clock_mhz_min", 0.0)),
            "sm_clock_mhz_max": float(c.get("sm_clock_mhz_max", 0.0)),
            "power_w_mean": float(c.get("power_w_mean", 0.0)), "power_w_max": float(c.get("power_w_max", 0.0)),
            "temperature_c_max": float(c.get("temperature_c_max", 0.0)),
            "error_message": r.get("error_message", ""), "ceiling_note": r.get("ceiling_note", ""),
            "source_sha256": r.get("source_sha256", ""), "build_log": r.get("build_log", ""),
        })
    return out


def _color(r):
    if not r["correct"] or r["error_message"]:
        return _FAIL
    return _PASS if r["timed"] else _UNTIMED


def _time_panel(ax, recs):
    import numpy as np
    x = np.arange(len(recs))
    vals = [r["value_ms"] if r["timed"] else 0.0 for r in recs]
    ax.bar(x, vals, color=[_color(r) for r in recs], yerr=[r["stddev_ms"] for r in recs], capsize=4)
    for i, r in enumerate(recs):
        if r["timed"] and r["max_ms"] > r["min_ms"]:
            ax.vlines(i, r["min_ms"], r["max_ms"], colors="black", linewidth=0.8)
        if not r["timed"]:
            ax.text(i, 0, "gate failed" if not r["correct"] else "not timed", rotation=90, ha="center",
                    va="bottom", fontsize=8, color=_color(r))
    timed = [v for v in vals if v > 0]
    if timed and max(timed) > 20 * min(timed):
        ax.set_yscale("log")  # an oracle next to a kernel: thousands of times apart
    ax.set_xticks(x, [r["variant"] for r in recs], rotation=20, ha="right")
    ax.set_ylabel("time (ms): value, ±sd, min..max")
    ax.set_title("time per variant")


def _rate_panel(ax, recs):
    import numpy as np
    x = np.arange(len(recs))
    gemm = max((r["gemm_ceiling_tflops"] for r in recs), default=0.0)
    copy = max((r["copy_ceiling_tbps"] for r in recs), default=0.0)
    # The op's limiting ceiling: the rate that is the larger fraction of its ceiling.
    use_copy = max((r["frac_copy_ceiling"] for r in recs), default=0) > max((r["frac_gemm_ceiling"] for r in recs),
                                                                             default=0)
    key, unit, ceiling = ("tbps", "TB/s", copy) if use_copy else ("tflops", "TFLOP/s", gemm)
    vals = np.array([r[key] if r["timed"] else 0.0 for r in recs])
    # Error bars from the time's spread: rate = work / time.
    err = np.array([r[key] * r["stddev_ms"] / r["value_ms"] if r["timed"] and r["value_ms"] > 0 else 0.0
                    for r in recs])
    ax.bar(x, vals, color=[_color(r) for r in recs], yerr=err, capsize=4)
    if ceiling > 0:
        ax.axhline(ceiling, color="black", linestyle="--", linewidth=1)
        ax.text(len(recs) - 0.5, ceiling, " measured %s ceiling %.3g %s" % ("copy" if use_copy else "GEMM", ceiling,
                                                                           unit),
                ha="right", va="bottom", fontsize=8)
    ax.set_xticks(x, [r["variant"] for r in recs], rotation=20, ha="right")
    ax.set_ylabel(unit)
    ax.set_title("achieved %s vs the device ceiling" % unit)


def _roofline_panel(ax, recs):
    import numpy as np
    gemm = max((r["gemm_ceiling_tflops"] for r in recs), default=0.0)
    copy = max((r["copy_ceiling_tbps"] for r in recs), default=0.0)
    pts = [(r["flops"] / r["bytes"], r["tflops"], r) for r in recs if r["timed"] and r["bytes"] > 0 and r["flops"] > 0]
    ais = [p[0] for p in pts] or [1.0]
    lo, hi = min(ais) / 10, max(ais) * 10
    if gemm > 0 and copy > 0:
        lo, hi = min(lo, gemm / copy / 10), max(hi, gemm / copy * 10)
    ai = np.logspace(np.log10(lo), np.log10(hi), 200)
    if copy > 0:
        ax.plot(ai, copy * ai if gemm <= 0 else np.minimum(gemm, copy * ai), color="black", linewidth=1.2,
                label="ceiling: min(GEMM %.3g TFLOP/s, copy %.3g TB/s × FLOP/B)" % (gemm, copy) if gemm > 0
                else "copy %.3g TB/s × FLOP/B" % copy)
    elif gemm > 0:
        ax.axhline(gemm, color="black", linewidth=1.2, label="GEMM %.3g TFLOP/s" % gemm)
    for a, t, r in pts:
        ax.scatter([a], [t], color=_color(r), zorder=3)
        ax.annotate(r["variant"], (a, t), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    if pts or gemm > 0 or copy > 0:
        ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("roofline")
    if pts:
        # Room below the lowest point and above the highest, so labels and the legend do not cover them.
        ys = [t for _, t, _ in pts] + ([gemm] if gemm > 0 else [])
        ax.set_ylim(min(ys) / 30, max(ys) * 3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left")


def _gate_panel(ax, recs):
    import numpy as np
    x = np.arange(len(recs))
    errs = [max(r["rel_rms"], 1e-12) for r in recs]
    # Points, not bars: on a log scale a bar's height from an arbitrary floor says nothing.
    ax.scatter(x, errs, s=80, zorder=3, color=[_PASS if r["correct"] else _FAIL for r in recs])
    for i, r in enumerate(recs):
        if r["tolerance"] > 0:
            ax.hlines(r["tolerance"], i - 0.4, i + 0.4, colors="black", linestyles="--")
        label = "pass" if r["correct"] else "FAIL"
        ax.annotate(label, (i, errs[i]), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8,
                    color=_PASS if r["correct"] else _FAIL)
    ys = errs + [r["tolerance"] for r in recs if r["tolerance"] > 0]
    ax.set_yscale("log")
    ax.set_ylim(min(ys) / 4, max(ys) * 4)
    ax.set_xlim(-0.6, len(recs) - 0.4)
    ax.set_xticks(x, [r["variant"] for r in recs], rotation=20, ha="right")
    ax.set_ylabel("rel. RMS error vs fp64 oracle (-- tolerance)")
    ax.set_title("correctness gate")


def _clock_series(job):
    """{variant: (seconds, SM MHz, power W)} of the results that carry their samples (a sustained job on a
    server that returns them)."""
    import numpy as np
    out = {}
    for r in job.get("results", []):
        c = r.get("clocks", {}) or {}
        mhz, watts = c.get("sm_clock_mhz_samples") or [], c.get("power_w_samples") or []
        period = float(c.get("sample_period_ms", 0.0) or 0.0)
        if mhz and period > 0:
            out[r.get("variant", "")] = (np.arange(len(mhz)) * period / 1e3, np.asarray(mhz, float),
                                         np.asarray(watts, float))
    return out


def _clock_panel(ax, recs, series=None):
    import numpy as np
    have = [r for r in recs if r["clocks_available"]]
    ax.set_title("clocks over the sustained window")
    if not have:
        notes = sorted({r["clocks_note"] for r in recs if r["clocks_note"]}) or [
            "method %s samples none; method=sustained does" % (recs[0]["method"].split()[0] if recs[0]["method"]
                                                                else "kernel")]
        ax.text(0.5, 0.5, "clocks not sampled\n" + "\n".join(_wrap(n, 60) for n in notes[:3]), ha="center",
                va="center", fontsize=8, transform=ax.transAxes)
        ax.set_axis_off()
        return
    if series:
        # The clock over time, one line per variant; power dashed on the right axis.
        ax2 = ax.twinx()
        for i, (variant, (t, mhz, watts)) in enumerate(sorted(series.items())):
            color = "C%d" % i
            ax.plot(t, mhz, color=color, linewidth=1.2, label="%s SM clock" % variant)
            if len(watts):
                ax2.plot(t[:len(watts)], watts[:len(t)], color=color, linestyle="--", linewidth=0.8,
                         label="%s power" % variant)
        ax.set_xlabel("time in the window (s)")
        ax.set_ylabel("SM clock (MHz)")
        ax2.set_ylabel("power (W), dashed")
        ax.legend(fontsize=7, loc="lower left")
        return
    x = np.arange(len(have))
    mean = np.array([r["sm_clock_mhz_mean"] for r in have])
    ax.errorbar(x, mean, yerr=[mean - [r["sm_clock_mhz_min"] for r in have],
                               np.array([r["sm_clock_mhz_max"] for r in have]) - mean], fmt="o", capsize=5,
                color="#1565c0", label="SM clock (mean, min..max)")
    ax.set_ylabel("SM clock (MHz)")
    ax.set_xticks(x, [r["variant"] for r in have], rotation=20, ha="right")
    ax2 = ax.twinx()
    ax2.plot(x, [r["power_w_mean"] for r in have], "s", color="#ef6c00", label="power mean (W)")
    ax2.set_ylabel("power (W)")
    ax.legend(fontsize=7, loc="lower left")


def _wrap(text, width):
    import textwrap
    return "\n".join(textwrap.wrap(str(text), width, subsequent_indent="  ")) or str(text)


def _draw(fig, job):
    job = normalize(job)
    recs = records(job)
    axes = fig.subplots(2, 3)
    head = "%s — %s %s — %s, %s" % (job.get("spec", {}).get("name", "") or job.get("id", ""), _op(job),
                                    job.get("shape_desc", ""), job.get("backend", ""), job.get("device_name", ""))
    fig.suptitle(head, fontsize=11)
    if not recs:
        for a in axes.flat:
            a.set_axis_off()
        axes[0][0].text(0, 0.5, "no results: job %s %s" % (job.get("state", ""), job.get("error", "")))
        return
    _time_panel(axes[0][0], recs)
    _rate_panel(axes[0][1], recs)
    _roofline_panel(axes[0][2], recs)
    _gate_panel(axes[1][0], recs)
    _clock_panel(axes[1][1], recs, _clock_series(job))
    info = axes[1][2]
    info.set_axis_off()
    lines = ["job %s  state %s" % (job.get("id", ""), recs[0]["state"]), "method %s" % recs[0]["method"],
             "server %s" % job.get("server_version", "")]
    for r in recs:
        lines.append("%s: %s%s" % (r["variant"], "rank %d" % r["rank"] if r["rank"] else "not ranked",
                                   (" — " + (r["gate_message"] or r["error_message"])[:120])
                                   if (r["gate_message"] or r["error_message"]) else ""))
    lines += sorted({"note: " + r["ceiling_note"][:240] for r in recs if r["ceiling_note"]})
    # Wrapped here: the panel is a third of the figure wide, and matplotlib's wrap=True wraps at the figure's edge.
    info.text(0, 1, "\n".join(_wrap(line, 62) for line in lines), va="top", fontsize=8, family="monospace",
              transform=info.transAxes)


def _notebook_shows_figures():
    """In a Jupyter kernel, registers IPython's PNG formatter for matplotlib Figures (what `%matplotlib inline`
    does), so that a returned Figure is drawn: the figures here are made without pyplot, which is what would
    otherwise register it. Does nothing outside IPython."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not getattr(shell, "_kernelserve_figures", False):
        select_figure_formats(shell, {"png"})
        shell._kernelserve_figures = True


def plot_jobs(jobs, path=None, dpi=100):
    """A matplotlib Figure of one or more jobs (one block of panels per job); saved to path when given."""
    from matplotlib.figure import Figure
    _notebook_shows_figures()
    jobs = list(jobs)
    fig = Figure(figsize=(16, 8.5 * max(1, len(jobs))), layout="constrained")
    subs = [fig] if len(jobs) <= 1 else list(fig.subfigures(len(jobs), 1))
    for sub, job in zip(subs, jobs or [{}]):
        _draw(sub, job)
    if path:
        fig.savefig(path, dpi=dpi)
    return fig


def plot_job(job, path=None, dpi=100):
    return plot_jobs([job], path, dpi)


def _fmt(v):
    if isinstance(v, float):
        return "%.4g" % v
    return html.escape(str(v))


_TABLE_COLUMNS = ["variant", "backend", "correct", "rel_rms", "tolerance", "value_ms", "stddev_ms", "tflops", "tbps",
                  "frac_gemm_ceiling", "frac_copy_ceiling", "sm_clock_mhz_mean", "rank", "speedup_vs_first",
                  "gate_message", "error_message"]


def html_table(recs, columns=None):
    cols = columns or _TABLE_COLUMNS
    rows = "".join("<tr>%s</tr>" % "".join('<td class="%s">%s</td>' % ("fail" if c == "correct" and not r[c] else "",
                                                                      _fmt(r[c])) for c in cols) for r in recs)
    return "<table><tr>%s</tr>%s</table>" % ("".join("<th>%s</th>" % c for c in cols), rows)


def html_report(jobs, path=None):
    """One self-contained HTML page: per job its metadata, the figure (PNG embedded) and the results table."""
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>kernelserve jobs</title><style>"
             "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}.fail{color:#c62828;font-weight:bold}"
             "img{max-width:100%}</style></head><body><h1>kernelserve benchmark jobs</h1>"]
    for job in jobs:
        job = normalize(job)
        buf = io.BytesIO()
        plot_job(job).savefig(buf, format="png", dpi=80)
        parts.append("<h2>%s</h2><p>%s %s — state %s — backend %s, device %s, server %s</p>" % tuple(
            html.escape(str(x)) for x in (job.get("spec", {}).get("name", "") or job.get("id", ""), _op(job),
                                          job.get("shape_desc", ""), job.get("state", ""), job.get("backend", ""),
                                          job.get("device_name", ""), job.get("server_version", ""))))
        parts.append("<img alt='plots of job %s' src='data:image/png;base64,%s'>" % (
            html.escape(job.get("id", "")), base64.b64encode(buf.getvalue()).decode()))
        parts.append(html_table(records(job)))
    parts.append("</body></html>")
    text = "\n".join(parts)
    if path:
        with open(path, "w") as f:
            f.write(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True, help="'kernelctl export --format=json' output, or one job")
    ap.add_argument("--plot", help="FILE.png or FILE.svg")
    ap.add_argument("--html", help="FILE.html: one self-contained report")
    args = ap.parse_args(argv)
    if not (args.plot or args.html):
        ap.error("give --plot and/or --html")
    if args.plot and not re.search(r"\.(png|svg)$", args.plot, re.I):
        ap.error("--plot must name a .png or .svg file, got %s" % args.plot)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.stderr.write("plotting needs matplotlib for %s: apt-get install python3-matplotlib\n" % sys.executable)
        return 3
    with open(args.json) as f:
        data = json.load(f)
    jobs = data.get("jobs", [data] if "id" in data else [])
    if not jobs:
        sys.stderr.write("%s holds no jobs\n" % args.json)
        return 1
    if args.plot:
        plot_jobs(jobs, args.plot)
        print("wrote %s (%d job%s)" % (args.plot, len(jobs), "" if len(jobs) == 1 else "s"))
    if args.html:
        html_report(jobs, args.html)
        print("wrote %s" % args.html)
    return 0


if __name__ == "__main__":
    sys.exit(main())
