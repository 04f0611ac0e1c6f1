#!/usr/bin/env python3
"""mezo/compare — gather every probe instance (failed and skipped ones included) into the entry's tables.

Input: one or more gathered folders ({{ in.probes.dir }}): one sub-folder per member named `k1=v1,k2=v2`
holding matrix.json, status.json and, when the member ran, its probe JSON. Python standard library only.

Writes:
  Markdown — per precision, one block per context side by side (rows per eps; columns sign, r, ratio), the
             unperturbed start loss per context and whether the contexts agree on it, and the list of
             failures: each instance that failed with its error line ("a8_w8 × SDK_BIT_EXACT FAILED ..."), and
             each upstream failure once with the precision x context instances it skipped ("a16_w4 FAILED ...").
  CSV      — one row per (precision, context, eps), plus one row per failed/skipped instance.
  JSON     — everything above, machine-readable.
"""
import argparse
import csv
import json
import os
import sys

PRECISION_ORDER = ["a16_w16", "a16_w8", "a16_w4", "a8_w8", "a8_w4"]


def parse_label_dir(name):
    out = {}
    for part in name.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def find_probe(hs, folder):
    for root, _dirs, files in os.walk(folder):
        for fn in sorted(files):
            if fn.endswith(".json") and fn not in ("matrix.json", "status.json"):
                d = hs.load_json(os.path.join(root, fn))
                if isinstance(d, dict) and d.get("kind") == "mezo-probe":
                    return d
    return None


def error_line(status):
    """The one-line error of a failed member, or of the upstream failure that skipped it."""
    if not status:
        return "no status.json", None
    if status.get("status") == "skipped" and status.get("cause"):
        c = status["cause"]
        return (c.get("error") or "upstream failure"), c.get("label")
    err = status.get("error")
    if not err and status.get("error_class"):
        err = status["error_class"]
    if not err and status.get("exit_code") is not None:
        err = f"exit {status['exit_code']}"
    return err or "failed (no error recorded)", status.get("label")


def collect(hs, dirs):
    members = []
    for d in dirs:
        if not d or not os.path.isdir(d):
            print(f"[compare] warning: gathered folder {d!r} missing", file=sys.stderr)
            continue
        for name, sub, matrix, status in hs.gathered(d):
            matrix = matrix or parse_label_dir(name)
            status = status or {}
            probe = find_probe(hs, sub) if status.get("status", "ok") == "ok" else None
            st = status.get("status") or ("ok" if probe else "failed")
            if st == "ok" and probe is None:
                st = "failed"
                status = dict(status, error="probe output missing")
            stream = matrix.get("stream") or ((probe or {}).get("params") or {}).get("stream") or ""
            m = {"precision": str(matrix.get("precision", "")), "context": str(matrix.get("context", "")),
                 "stream": str(stream), "matrix": matrix, "status": st, "label": status.get("label") or name,
                 "probe": probe}
            if probe and not m["context"]:
                m["context"] = probe.get("context", "")
            if st != "ok":
                m["error"], m["error_at"] = error_line(status)
            members.append(m)
    return members


def prec_key(p):
    return (PRECISION_ORDER.index(p) if p in PRECISION_ORDER else len(PRECISION_ORDER), p)


def fmt_ratio(x):
    if x is None:
        return "–"
    if isinstance(x, str):
        return x + "x"
    if x >= 100:
        return f"{x:,.0f}x"
    if x >= 1:
        return f"{x:.1f}x"
    return f"{x:.2f}x" if x >= 0.01 else f"{x:.2g}x"


def fmt_sign(x):
    return "–" if x is None else f"{100 * x:.1f}%"


def fmt_r(x):
    return "–" if x is None else f"{x:+.3f}"


ENTRY_NOTE = ("start loss: under the entry protocol each context's target is its own unperturbed output plus one "
              "shared noise, so every context's start loss is the same number by construction and says nothing about "
              "whether the contexts agree; max abs diff vs float at t0 measures that directly.")


def protocol_of(m):
    return ((m.get("probe") or {}).get("params") or {}).get("protocol", "lora")


def context_key(order):
    return lambda m: (order.index(m["context"]) if m["context"] in order else len(order), m["context"], m["stream"])


def column(m, streams):
    """A member's column name: its context, and its random stream when the table holds more than one."""
    return f"{m['context']} [{m['stream']}]" if len(streams) > 1 else m["context"]


def stream_note(ok):
    """What each entry-protocol stream drew from, from the probes' own params."""
    seen = {}
    for m in ok:
        pr = m["probe"].get("params") or {}
        if pr.get("protocol") == "entry" and m["stream"]:
            seen.setdefault(m["stream"], pr)
    parts = []
    if "continue" in seen:
        seed = seen["continue"].get("author_seed")
        parts.append(f"continue = X, noise and z continue the author's np.random.seed({seed}) stream after its "
                     "weights and calibration set (the entry's SDK_QUANTIZED probe)")
    if "reseed" in seen:
        seed = seen["reseed"].get("seed")
        parts.append(f"reseed = np.random.seed({seed}) before X (the entry's SDK_BIT_EXACT probe)")
    return "stream: " + "; ".join(parts) + "." if len(seen) > 1 else None


def render(members, title, context_order=()):
    context_order = list(context_order)
    ok = [m for m in members if m["status"] == "ok"]
    bad = [m for m in members if m["status"] != "ok"]
    precisions = sorted({m["precision"] for m in members}, key=prec_key)
    lines = [f"# {title}", ""]
    doubles = sorted({str(((m["probe"].get("context_info") or {}).get("sdk") or {}).get("test_double"))
                      for m in ok if ((m["probe"].get("context_info") or {}).get("sdk") or {}).get("test_double")})
    if doubles:
        lines.append(f"> **TEST DOUBLE** ({'; '.join(doubles)}): these numbers come from a numpy fake of the SDK "
                     "(tests/images/dfc-double) and mean nothing; the table only shows that the chain ran through "
                     "the documented API and that SDK failures reach it.")
        lines.append("")
    lines.append("sign: agreement between the context's zeroth-order estimate and the float one on the same z; "
                 "r: Pearson correlation over the draws; ratio: median |g_context| / median |g_float|.")
    lines.append("")
    if any(protocol_of(m) == "entry" for m in ok):
        lines.append(ENTRY_NOTE)
        lines.append("")
    streams = {m["stream"] for m in members}
    note = stream_note(ok)
    if note:
        lines.append(note)
        lines.append("")
    agreement = {}
    for p in precisions:
        runs = sorted([m for m in ok if m["precision"] == p], key=context_key(context_order))
        if not runs:
            continue
        lines.append(f"## {p}" if p else "## (no precision)")
        lines.append("")
        eps_list = runs[0]["probe"]["params"]["eps"]
        head = ["eps"]
        sep = ["---"]
        for m in runs:
            head += [f"{column(m, streams)} sign", "r", "ratio"]
            sep += ["---:", "---:", "---:"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("| " + " | ".join(sep) + " |")
        for i, e in enumerate(eps_list):
            row = [f"{e:.0e}"]
            for m in runs:
                rr = m["probe"]["rows"][i] if i < len(m["probe"]["rows"]) else {}
                row += [fmt_sign(rr.get("sign")), fmt_r(rr.get("r")), fmt_ratio(rr.get("ratio"))]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines.append("| context | start loss | float start loss | max abs diff vs float at t0 |")
        lines.append("| --- | ---: | ---: | ---: |")
        for m in runs:
            pr = m["probe"]
            lines.append(f"| {column(m, streams)} | {pr['start_loss']:.4e} | {pr['start_loss_float']:.4e} | "
                         f"{pr['start_output_max_abs_diff_vs_float']:.3e} |")
        # Contexts are compared within one random stream: two streams draw different X.
        by_stream = {}
        for m in runs:
            by_stream.setdefault(m["stream"], []).append(m)
        same5 = all(len({f"{m['probe']['start_loss']:.4e}" for m in g}) == 1 for g in by_stream.values())
        exact = all(len({m["probe"].get("start_output_digest") for m in g}) == 1 for g in by_stream.values())
        agreement[p] = {"agree_5_figures": same5, "identical_outputs": exact,
                        "contexts": [column(m, streams) for m in runs]}
        if len(runs) > len(by_stream) and all(protocol_of(m) == "entry" for m in runs):
            lines.append("")
            each = "every context" if len(by_stream) == 1 else "every context of a stream"
            lines.append(f"Start loss {'equal' if same5 else 'NOT equal'} in {each} (by construction); "
                         f"unperturbed outputs {'bit-identical' if exact else 'differ'} across contexts.")
        elif len(runs) > 1:
            lines.append("")
            lines.append(f"Contexts {'agree' if same5 else 'DISAGREE'} on the start loss to five figures; "
                         f"unperturbed outputs {'bit-identical' if exact else 'differ'}.")
        lines.append("")
    lines.append("## Failed or skipped instances")
    lines.append("")
    failures = failure_rows(bad, streams)
    if not failures:
        lines.append("none")
    for f in failures:
        lines.append(f"- {f['line']}")
    lines.append("")
    return "\n".join(lines), agreement, failures


def failure_rows(bad, streams=()):
    """One row per failure: an instance that failed itself ("a8_w8 × SDK_BIT_EXACT FAILED InferenceError: ..."),
    or one upstream failure with every precision x context it skipped ("a16_w4 FAILED AttributeError: ...
    (in optimize[precision=a16_w4]; skipped: SDK_BIT_EXACT, SDK_QUANTIZED)")."""
    groups = {}
    for m in sorted(bad, key=lambda m: (prec_key(m["precision"]), m["context"], m["stream"])):
        upstream = m.get("error_at") and m["error_at"] != m["label"]
        key = ((m["precision"], m["error"], m["error_at"]) if upstream
               else (m["precision"], m["context"], m["stream"], m["label"]))
        groups.setdefault(key, []).append(m)
    rows = []
    for members in groups.values():
        m = members[0]
        prec = m["precision"] or "?"
        if m.get("error_at") and m["error_at"] != m["label"]:
            ctxs = [column(x, streams) or "?" for x in members]
            line = f"{prec} FAILED {m['error']} (in {m['error_at']}; {m['status']}: {', '.join(ctxs)})"
            rows.append({"precision": m["precision"], "contexts": ctxs, "status": m["status"],
                         "error": m["error"], "at": m["error_at"], "line": line})
        else:
            line = f"{prec} × {column(m, streams) or '?'} FAILED {m['error']}"
            rows.append({"precision": m["precision"], "contexts": [m["context"]], "status": m["status"],
                         "error": m["error"], "at": m["label"], "line": line})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes-dir", action="append", default=[], help="gathered folder; repeatable")
    ap.add_argument("--title", default="MeZO probe: zeroth-order estimates per inference context")
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-csv", required=True)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-plots", help="heddle plots file (heddle report draws it)")
    ap.add_argument("--context-order", default="[]", help="JSON list: contexts in this order, the rest by name")
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    members = collect(hs, a.probes_dir)
    md, agreement, failures = render(members, a.title, json.loads(a.context_order))
    with open(a.out_md, "w") as f:
        f.write(md)
    with open(a.out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["precision", "context", "status", "eps", "sign", "r", "ratio", "median_abs_g",
                    "median_abs_g_float", "start_loss", "start_loss_float", "error", "error_at", "stream"])
        for m in sorted(members, key=lambda m: (prec_key(m["precision"]), m["context"], m["stream"])):
            if m["status"] == "ok":
                pr = m["probe"]
                for r in pr["rows"]:
                    w.writerow([m["precision"], m["context"], "ok", r["eps"], r["sign"], r["r"], r["ratio"],
                                r["median_abs_g"], r["median_abs_g_float"], pr["start_loss"],
                                pr["start_loss_float"], "", "", m["stream"]])
            else:
                w.writerow([m["precision"], m["context"], m["status"], "", "", "", "", "", "", "", "",
                            m["error"], m.get("error_at") or "", m["stream"]])
    summary = {"members": [{k: v for k, v in m.items() if k != "probe"} | (
        {"start_loss": m["probe"]["start_loss"], "start_loss_float": m["probe"]["start_loss_float"],
         "rows": [{k: v for k, v in r.items() if k not in ("g", "g_float")} for r in m["probe"]["rows"]]}
        if m["probe"] else {}) for m in members], "start_loss_agreement": agreement, "failures": failures}
    with open(a.out_json, "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    if a.out_plots:
        with open(a.out_plots, "w") as f:
            json.dump(plots(members), f, indent=2, sort_keys=True)
    sys.stdout.write(md)


def plots(members):
    """Sign agreement, r and ratio against eps, one series per precision x context, in heddle's
    plots schema ({"plots": [{title, x_label, y_label, x_log, y_log, series: [{name, panel,
    points}]}]}): a series is named by its context and drawn in its precision's panel, so the
    report sets the precisions side by side as the tables are."""
    ok = sorted((m for m in members if m["status"] == "ok"),
                key=lambda m: (prec_key(m["precision"]), m["context"], m["stream"]))
    streams = {m["stream"] for m in members}
    out = []
    for metric, label, y_log in (("sign", "sign agreement", False), ("r", "Pearson r", False),
                                 ("ratio", "median |g| ratio (quantised / float)", True)):
        series = []
        for m in ok:
            pts = [[r["eps"], r[metric]] for r in m["probe"]["rows"]
                   if r.get(metric) is not None and (not y_log or r[metric] > 0)]
            series.append({"name": column(m, streams), "panel": m["precision"], "points": sorted(pts)})
        out.append({"title": f"{label} vs eps", "x_label": "eps", "y_label": label,
                    "x_log": True, "y_log": y_log, "series": series})
    return {"plots": out}


if __name__ == "__main__":
    main()
