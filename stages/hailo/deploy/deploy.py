#!/usr/bin/env python3
"""hailo/deploy — identify the Hailo device and benchmark a HEF on it, on the host that holds the device.

  hailortcli --version                      -> the HailoRT that measured (recorded)
  hailortcli fw-control identify            -> architecture ("Device Architecture: HAILO10H"), firmware version
  hailortcli parse-hef HEF                  -> the architectures the HEF is for, and a compiler version if printed;
                                               the DFC version that compiled it comes from dfc/compile's report
  hailortcli run2 -t SECS -j stats.json --measure-latency --measure-overall-latency --measure-temp set-net HEF
        repeated `repeats` times (the entry: 3 runs, 2 % spread): fps per run, mean and spread (max - min) / mean.
        HailoRT 5.x: `run` refuses PCIe devices; run2's JSON gives FPS as a STRING, hw_latency / overall_latency in
        ms, devices[].temperature {min,max,average} strings with units. On a device that cannot measure its
        temperature, --measure-temp fails the whole run: the run is retried without it and the temperature
        recorded as unsupported, with the error line.
  transfer cost = overall latency - hw latency (the entry: 3.95 - 2.27 = 1.68 ms, 43 % of end to end).
  power and current: separate short run2s with --measure-power / --measure-current; "not supported" (as on the
        entry's device) -> *_supported false with the error line.
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
    """`hailortcli parse-hef` output -> architectures (5.x "HEF Compatible for: A, B"; 4.x "Architecture HEF was
    compiled for: A") and a compiler version line if the CLI prints one (None otherwise)."""
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


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def run2(cli, hef, seconds, extra, td, tag):
    js = os.path.join(td, f"{tag}.json")
    cmd = [cli, "run2", "-t", str(seconds), "-j", js, *extra, "set-net", hef]
    rc, text = run(cmd, seconds + 120)
    stats = json.load(open(js)) if rc == 0 and os.path.exists(js) else None
    return rc, text, stats


def benchmark(cli, hef, seconds, repeats, td):
    """`repeats` latency runs; the first decides whether the device can measure its temperature."""
    lat = ["--measure-latency", "--measure-overall-latency"]
    temp_flag, temp_note = ["--measure-temp"], None
    runs = []
    for i in range(repeats):
        rc, text, stats = run2(cli, hef, seconds, lat + temp_flag, td, f"bench{i}")
        if stats is None and temp_flag:
            temp_note = f"run2 --measure-temp exit {rc}: {last_line(text)}"
            temp_flag = []
            rc, text, stats = run2(cli, hef, seconds, lat, td, f"bench{i}-notemp")
        if stats is None:
            raise HailoCliError(f"run2 exit {rc}: {last_line(text)}")
        runs.append((parse_run2(stats), stats))
    return runs, temp_note


def optional_measure(cli, hef, flag, key, td):
    rc, text, stats = run2(cli, hef, 3, [flag], td, key)
    vals = parse_run2(stats)[key] if stats else None
    if vals and vals.get("average") is not None:
        return True, vals, None
    return False, None, f"run2 {flag} exit {rc}: {last_line(text)}"


def truthy(s):
    return str(s).lower() in ("1", "true", "yes")


def deploy(a):
    rc, version_text = run([a.hailortcli, "--version"], 60)
    if rc != 0:
        raise HailoCliError(f"hailortcli --version exit {rc}: {last_line(version_text)}")
    rc, ident_text = run([a.hailortcli, "fw-control", "identify"], 60)
    if rc != 0:
        raise HailoCliError(f"fw-control identify exit {rc}: {last_line(ident_text)}")
    ident = parse_identify(ident_text)
    rc, hef_text = run([a.hailortcli, "parse-hef", a.hef], 60)
    hef = parse_hef_info(hef_text) if rc == 0 else {"compatible_for": None, "compiler_version": None,
                                                    "error": f"parse-hef exit {rc}: {last_line(hef_text)}"}
    if a.compile_report:
        with open(a.compile_report) as f:
            sdk = (json.load(f).get("sdk") or {})
        hef["compiled_by"] = {"module": sdk.get("module"), "version": sdk.get("version"),
                              "test_double": sdk.get("test_double")}
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
    parsed = [r for r, _ in runs]
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
            **extra, "details": {"run2": [s for _, s in runs], "seconds": a.seconds}}


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
