#!/usr/bin/env python3
"""hailo/deploy — identify the Hailo device and benchmark a HEF on it, on the host that holds the device.

  hailortcli --version                      -> the HailoRT that measured (recorded)
  hailortcli fw-control identify            -> architecture ("Device Architecture: HAILO10H"), firmware version
  hailortcli parse-hef HEF                  -> the architectures the HEF is for, and a compiler version if printed;
                                               the DFC version that compiled it comes from dfc/compile's report
  hailortcli run2 -t SECS -j fps.json --measure-temp set-net HEF                 (throughput)
  hailortcli run2 -t SECS -j lat.json --measure-latency --measure-overall-latency set-net HEF   (latency)
        each pair repeated `repeats` times (the entry: 3 runs, 2 % spread): fps per run, mean and spread
        (max - min) / mean; latencies averaged. Throughput and latency are SEPARATE invocations because measuring
        latency turns FPS off: hailort/hailortcli/run2/network_runner.cpp sets
        measure_fps = !measure_hw_latency && !measure_overall_latency, network_live_track.cpp writes "FPS" only
        when it is set, and run2_command.cpp warns "frames are sent one at a time and FPS will not be measured".
        run2's JSON gives FPS as a STRING, hw_latency / overall_latency in ms, devices[].temperature
        {min,max,average} strings with units. HailoRT 5.x: `run` refuses PCIe devices, hence run2.
        On a device that cannot measure its temperature, --measure-temp fails the whole run with run2's capability
        check ("Temperature measurement not supported. Disable the measure-temp option" from 4.20 on; 4.19 says
        "temp-measure", 4.18 "HW arch X does not support temperature measurement"): only then is the run retried
        without it and the temperature recorded as unsupported, with the error line. Any other failure fails the
        stage with its own error line.
  transfer cost = overall latency - hw latency (the entry: 3.95 - 2.27 = 1.68 ms, 43 % of end to end).
  power and current: separate short run2s with --measure-power / --measure-current; the capability check's
        "not supported" (as on the entry's device) -> *_supported false with the error line; any other failure ->
        *_supported null ("measurement failed") with its error line.
Writes JSON of the same shape as ort/deploy (device, fps, hw_latency_ms, overall_latency_ms, temperature_c,
power_supported, power_w) plus the fields above. Follows the documented CLI; untested on real hardware until someone
runs it there (checked here against a hailortcli test double).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile


class HailoCliError(RuntimeError):
    pass


def parse_identify(text):
    out = {}
    for key, pat in (("architecture", r"Device Architecture:\s*(.+)"), ("firmware", r"Firmware Version:\s*(.+)"),
                     ("board_name", r"Board Name:\s*(.+)"), ("serial", r"Serial Number:\s*(.+)")):
        m = re.search(pat, text)
        out[key] = m.group(1).strip() if m else None
    return out


def parse_hef_info(text):
    """`hailortcli parse-hef` output -> architectures and the compiler version when the CLI prints it (else None).
    Hef::Impl::get_description (hailort libhailort/src/hef/hef.cpp) prints "Architecture HEF was compiled for: A" up
    to 5.0.x (all 4.x), "HEF Compatible for: A, B" from 5.1.0, and from 5.2.0 also "HEF Compiler Version: X.Y.Z"
    (omitted when the HEF carries no SDK version)."""
    m = re.search(r"HEF Compatible for:\s*(.+)", text) or re.search(r"Architecture HEF was compiled for:\s*(.+)", text)
    archs = [a.strip() for a in m.group(1).split(",")] if m else None
    v = re.search(r"(?:Compiler|SDK|DFC)[ _]?[Vv]ersion:\s*(.+)", text)
    return {"compatible_for": archs, "compiler_version": v.group(1).strip() if v else None}


def _num(v):
    """'1168.32' -> 1168.32; '38.7 C' -> 38.7; numbers pass through; otherwise None."""
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = re.search(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", v)
        return float(m.group(0)) if m else None
    return None


def _mma(d):
    return {k: _num(d.get(k)) for k in ("min", "average", "max")} if d else None


def parse_run2(stats):
    ng = (stats.get("network_groups") or [{}])[0]
    dev = (stats.get("devices") or [{}])[0]
    return {"fps": _num(ng.get("FPS")), "hw_latency_ms": _num(ng.get("hw_latency")),
            "overall_latency_ms": _num(ng.get("overall_latency")),
            "temperature_c": _mma(dev.get("temperature")), "power_w": _mma(dev.get("power")),
            "current_ma": _mma(dev.get("current")), "device_id": dev.get("device_id")}


def spread(values):
    """(max - min) / mean: the entry's 1177.4 / 1174.0 / 1153.9 FPS -> 0.020."""
    m = statistics.fmean(values)
    return (max(values) - min(values)) / m if m else None


def transfer(hw_ms, overall_ms):
    """Host <-> device crossing cost: overall latency minus the NN core's, in ms and as a share of overall."""
    if hw_ms is None or overall_ms is None or overall_ms <= 0:
        return None, None
    t = overall_ms - hw_ms
    return t, t / overall_ms


def last_line(text):
    return (text.strip().splitlines() or [""])[-1]


def error_line(text):
    """The line that says why a hailortcli call failed: the last "[error]" line, else the last line."""
    errors = [ln.strip() for ln in text.splitlines() if "[error]" in ln]
    return errors[-1] if errors else last_line(text)


# run2's capability checks (hailort/hailortcli/run2/run2_command.cpp): 4.18 "HW arch X does not support temperature
# measurement. Disable the temp-measure option", 4.19 "Temperature measurement not supported. Disable the
# temp-measure option", 4.20+ and 5.x "... Disable the measure-temp option"; the same for power and current.
def unsupported(what, text):
    return re.search(rf"{what} measurement not supported|does not support {what.lower()} measurement", text,
                     re.I) is not None


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def run2(cli, hef, seconds, extra, td, tag):
    js = os.path.join(td, f"{tag}.json")
    cmd = [cli, "run2", "-t", str(seconds), "-j", js, *extra, "set-net", hef]
    rc, text = run(cmd, seconds + 120)
    stats = json.load(open(js)) if rc == 0 and os.path.exists(js) else None
    return rc, text, stats


LATENCY = ["--measure-latency", "--measure-overall-latency"]


def benchmark(cli, hef, seconds, repeats, td):
    """`repeats` pairs of run2s: throughput (FPS, with --measure-temp while the device supports it), then latency
    (hw and overall; run2 measures no FPS then). -> (runs [(parsed, throughput stats, latency stats)], temp note)."""
    temp_flag, temp_note = ["--measure-temp"], None
    runs = []
    for i in range(repeats):
        rc, text, stats = run2(cli, hef, seconds, temp_flag, td, f"fps{i}")
        if stats is None and temp_flag and unsupported("Temperature", text):
            temp_note = f"run2 --measure-temp exit {rc}: {error_line(text)}"
            temp_flag = []
            rc, text, stats = run2(cli, hef, seconds, [], td, f"fps{i}-notemp")
        if stats is None:
            raise HailoCliError(f"run2 (throughput) exit {rc}: {error_line(text)}")
        thr = parse_run2(stats)
        if thr["fps"] is None:
            raise HailoCliError("run2 without latency flags reported no FPS (network_groups[0].FPS missing)")
        rc, text, lat_stats = run2(cli, hef, seconds, LATENCY, td, f"lat{i}")
        if lat_stats is None:
            raise HailoCliError(f"run2 {' '.join(LATENCY)} exit {rc}: {error_line(text)}")
        lat = parse_run2(lat_stats)
        parsed = dict(thr, hw_latency_ms=lat["hw_latency_ms"], overall_latency_ms=lat["overall_latency_ms"])
        runs.append((parsed, stats, lat_stats))
    return runs, temp_note


def optional_measure(cli, hef, flag, key, td):
    """-> (supported: True / False (the capability check said no) / None (the run failed otherwise), values, note)."""
    rc, text, stats = run2(cli, hef, 3, [flag], td, key)
    vals = parse_run2(stats)[key] if stats else None
    if vals and vals.get("average") is not None:
        return True, vals, None
    what = "Power" if key == "power_w" else "Current"
    if stats is None and unsupported(what, text):
        return False, None, f"run2 {flag} exit {rc}: {error_line(text)}"
    return None, None, f"run2 {flag} failed (not the unsupported-measurement check): exit {rc}: {error_line(text)}"


def truthy(s):
    return str(s).lower() in ("1", "true", "yes")


def deploy(a):
    rc, version_text = run([a.hailortcli, "--version"], 60)
    if rc != 0:
        raise HailoCliError(f"hailortcli --version exit {rc}: {error_line(version_text)}")
    rc, ident_text = run([a.hailortcli, "fw-control", "identify"], 60)
    if rc != 0:
        raise HailoCliError(f"fw-control identify exit {rc}: {error_line(ident_text)}")
    ident = parse_identify(ident_text)
    rc, hef_text = run([a.hailortcli, "parse-hef", a.hef], 60)
    hef = parse_hef_info(hef_text) if rc == 0 else {"compatible_for": None, "compiler_version": None,
                                                    "error": f"parse-hef exit {rc}: {error_line(hef_text)}"}
    if a.compile_report:
        with open(a.compile_report) as f:
            sdk = (json.load(f).get("sdk") or {})
        hef["compiled_by"] = {"module": sdk.get("module"), "version": sdk.get("version"),
                              "test_double": sdk.get("test_double")}
        # The HEF's own record of its compiler (HailoRT >= 5.2) against the DFC that dfc/compile reported.
        if hef.get("compiler_version") and sdk.get("version"):
            hef["compiler_matches_report"] = hef["compiler_version"] == str(sdk["version"]).split("+")[0]
    with tempfile.TemporaryDirectory() as td:
        runs, temp_note = benchmark(a.hailortcli, a.hef, a.seconds, max(1, a.repeats), td)
        extra = {}
        for flag, key, want in (("--measure-power", "power_w", a.measure_power),
                                ("--measure-current", "current_ma", a.measure_current)):
            name = key.split("_")[0]
            if truthy(want):
                ok, vals, note = optional_measure(a.hailortcli, a.hef, flag, key, td)
            else:
                ok, vals, note = False, None, "not requested"
            extra.update({f"{name}_supported": ok, key: vals, f"{name}_note": note})
    parsed = [r for r, _, _ in runs]
    fps = [r["fps"] for r in parsed if r["fps"] is not None]
    mean = lambda k: statistics.fmean([r[k] for r in parsed if r[k] is not None]) if any(  # noqa: E731
        r[k] is not None for r in parsed) else None
    hw, overall = mean("hw_latency_ms"), mean("overall_latency_ms")
    t_ms, t_share = transfer(hw, overall)
    temps = [r["temperature_c"] for r in parsed if r["temperature_c"]]
    temperature = ({"min": min(t["min"] for t in temps), "average": statistics.fmean(t["average"] for t in temps),
                    "max": max(t["max"] for t in temps)} if temps else None)
    return {"kind": "deploy-benchmark", "backend": "hailo", "instance": os.environ.get("HEDDLE_INSTANCE", ""),
            "device": {"architecture": ident["architecture"], "firmware": ident["firmware"], "identify": ident},
            "hailortcli_version": last_line(version_text), "hef": hef,
            "fps": statistics.fmean(fps) if fps else None, "fps_runs": fps,
            "fps_spread": spread(fps) if fps else None, "repeats": len(runs),
            "hw_latency_ms": hw, "overall_latency_ms": overall, "transfer_ms": t_ms, "transfer_share": t_share,
            "temperature_c": temperature, "temperature_supported": temp_note is None, "temperature_note": temp_note,
            **extra, "details": {"run2_throughput": [t for _, t, _ in runs], "run2_latency": [la for _, _, la in runs],
                                 "seconds": a.seconds}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hef", required=True)
    ap.add_argument("--compile-report", default="", help="dfc/compile's report: the DFC version that made the HEF")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hailortcli", default="hailortcli")
    ap.add_argument("--measure-power", default="true")
    ap.add_argument("--measure-current", default="true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    out = hs.run(lambda: deploy(a))
    hs.write_report(a.out, out, ("fps", "fps_spread", "hw_latency_ms", "overall_latency_ms", "transfer_ms",
                                 "temperature_supported", "power_supported", "current_supported"))
    # The run record names the device and the HailoRT that made the measurement (heddle reads this file).
    facts = os.environ.get("HEDDLE_FACTS_FILE")
    if facts:
        with open(facts, "w") as f:
            json.dump({"device": out["device"], "hailortcli": a.hailortcli,
                       "hailortcli_version": out["hailortcli_version"]}, f)


if __name__ == "__main__":
    main()
