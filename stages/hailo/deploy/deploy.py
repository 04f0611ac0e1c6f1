#!/usr/bin/env python3
"""hailo/deploy — identify the Hailo device and benchmark a HEF on it, on the host that holds the device.

  hailortcli fw-control identify            -> architecture ("Device Architecture: HAILO10H"), firmware version
  hailortcli run2 -t SECS -j stats.json --measure-latency --measure-overall-latency --measure-temp set-net HEF
        (HailoRT 5.x: `run` refuses PCIe devices; run2's JSON gives FPS as a STRING, hw_latency / overall_latency in
         ms, devices[].temperature {min,max,average} strings with units)
  power: a separate short run2 with --measure-power; "not supported" (as the logbook found) -> power_supported false.
Writes JSON of the same shape as ort/deploy: device, fps, hw_latency_ms, overall_latency_ms, temperature_c,
power_supported, power_w. Follows the documented CLI; untested on real hardware until someone runs it there.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback


class HailoCliError(RuntimeError):
    pass


def parse_identify(text):
    out = {}
    for key, pat in (("architecture", r"Device Architecture:\s*(.+)"), ("firmware", r"Firmware Version:\s*(.+)"),
                     ("board_name", r"Board Name:\s*(.+)"), ("serial", r"Serial Number:\s*(.+)")):
        m = re.search(pat, text)
        out[key] = m.group(1).strip() if m else None
    return out


def _num(v):
    """'1168.32' -> 1168.32; '38.7 C' -> 38.7; numbers pass through; otherwise None."""
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = re.search(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", v)
        return float(m.group(0)) if m else None
    return None


def parse_run2(stats):
    ng = (stats.get("network_groups") or [{}])[0]
    dev = (stats.get("devices") or [{}])[0]
    temp = dev.get("temperature") or {}
    power = dev.get("power") or {}
    return {"fps": _num(ng.get("FPS")), "hw_latency_ms": _num(ng.get("hw_latency")),
            "overall_latency_ms": _num(ng.get("overall_latency")),
            "temperature_c": {k: _num(temp.get(k)) for k in ("min", "average", "max")} if temp else None,
            "power_w": {k: _num(power.get(k)) for k in ("min", "average", "max")} if power else None,
            "device_id": dev.get("device_id")}


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hef", required=True)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--hailortcli", default="hailortcli")
    ap.add_argument("--measure-power", default="true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        rc, ident_text = run([a.hailortcli, "fw-control", "identify"], 60)
        if rc != 0:
            raise HailoCliError(f"fw-control identify exit {rc}: {ident_text.strip().splitlines()[-1:]}")
        ident = parse_identify(ident_text)
        with tempfile.TemporaryDirectory() as td:
            js = os.path.join(td, "run2.json")
            cmd = [a.hailortcli, "run2", "-t", str(a.seconds), "-j", js, "--measure-latency",
                   "--measure-overall-latency", "--measure-temp", "set-net", a.hef]
            rc, text = run(cmd, a.seconds + 120)
            if rc != 0 or not os.path.exists(js):
                raise HailoCliError(f"run2 exit {rc}: {text.strip().splitlines()[-1:]}")
            stats = json.load(open(js))
            bench = parse_run2(stats)
            power = {"power_supported": False, "power_w": None, "power_note": "not requested"}
            if a.measure_power.lower() in ("1", "true", "yes"):
                pj = os.path.join(td, "power.json")
                rc, ptext = run([a.hailortcli, "run2", "-t", "3", "-j", pj, "--measure-power", "set-net", a.hef], 180)
                pw = parse_run2(json.load(open(pj)))["power_w"] if rc == 0 and os.path.exists(pj) else None
                if pw and pw.get("average") is not None:
                    power = {"power_supported": True, "power_w": pw, "power_note": None}
                else:
                    last = (ptext.strip().splitlines() or [""])[-1]
                    power = {"power_supported": False, "power_w": None,
                             "power_note": f"run2 --measure-power exit {rc}: {last}"}
    except Exception as e:
        path = os.environ.get("HEDDLE_ERROR_FILE")
        if path:
            with open(path, "w") as f:
                json.dump({"class": type(e).__name__, "message": str(e)}, f)
        traceback.print_exc()
        sys.exit(1)
    out = {"kind": "deploy-benchmark", "backend": "hailo", "instance": os.environ.get("HEDDLE_INSTANCE", ""),
           "device": {"architecture": ident["architecture"], "firmware": ident["firmware"], "identify": ident},
           "fps": bench["fps"], "hw_latency_ms": bench["hw_latency_ms"],
           "overall_latency_ms": bench["overall_latency_ms"], "temperature_c": bench["temperature_c"],
           **power, "details": {"run2": stats, "seconds": a.seconds}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    # The run record names the device that made the measurement (heddle reads this file).
    facts = os.environ.get("HEDDLE_FACTS_FILE")
    if facts:
        with open(facts, "w") as f:
            json.dump({"device": out["device"], "hailortcli": a.hailortcli}, f)
    print(json.dumps({k: out[k] for k in ("fps", "hw_latency_ms", "overall_latency_ms", "power_supported")}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
