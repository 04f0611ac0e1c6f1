#!/usr/bin/env python3
"""dfc/identify — which Hailo Dataflow Compiler the DFC stages of this run use, checked before the long stages start.

Reports (toolchain.json, and the run record through $HEDDLE_FACTS_FILE):
  * the DFC: distribution version (importlib.metadata "hailo-dataflow-compiler", else hailo_sdk_client.__version__),
    and the TEST DOUBLE marker when it is tests/images/dfc-double's fake;
  * hw_arch values it accepts: hailo_sdk_client.exposed_definitions.SUPPORTED_HW_ARCHS when the package has it, else
    probed by constructing ClientRunner(hw_arch=...) for each public name (the constructor is the documented entry
    point and refuses an unknown target; it builds no model);
  * the GPU where the DFC runs: /dev/nvidia<N> devices and `nvidia-smi -L`, plus CUDA_VISIBLE_DEVICES;
  * HailoRT beside it: `hailortcli --version` and the hailo_platform package version, when installed.
toolchain.json holds only what a result depends on (the DFC's identity and accepted targets), so a GPU appearing does
not rerun the stages after it; the GPU and HailoRT go to the facts only.
Untested against the real DFC until someone runs it there (checked here against the test double).
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

# Public target names (docs/hailo-toolchain.md): Hailo-8 family and Hailo-10/15 family.
PUBLIC_HW_ARCHS = ["hailo8", "hailo8l", "hailo8r", "hailo10h", "hailo15h", "hailo15m", "hailo15l"]

ROUTES = ("no Hailo Dataflow Compiler here: `import hailo_sdk_client` failed with {python} ({why}). "
          "Bring your DFC one of three ways (README, section \"Bring your DFC\"): "
          "(a) the AI Software Suite image: [dfc] image = \"hailo_ai_sw_suite_<YYYY-MM>:1\" in .heddle/config.toml; "
          "(b) the DFC wheel in an image heddle builds: [dfc] wheel = \"hailo_dataflow_compiler-<ver>-py3-none-linux_x86_64.whl\"; "
          "(c) the DFC wheel in a host python env: [dfc] wheel = \"...\" with run_on = \"host\"")


class DfcNotFound(Exception):
    """hailo_sdk_client does not import with this interpreter."""


class HwArchNotAccepted(Exception):
    """The DFC does not accept the hw_arch the pipeline asks for."""


def dfc_version(sdk):
    try:
        from importlib import metadata
        return metadata.version("hailo-dataflow-compiler")
    except Exception:  # not installed as a distribution (a PYTHONPATH copy), or no importlib.metadata
        return getattr(sdk, "__version__", None)


def accepted_hw_archs(sdk):
    """(names, how they were found)."""
    try:
        from hailo_sdk_client import exposed_definitions
        names = getattr(exposed_definitions, "SUPPORTED_HW_ARCHS", None)
        if names:
            return sorted(str(n) for n in names), "exposed_definitions.SUPPORTED_HW_ARCHS"
    except ImportError:
        pass
    ok = []
    for name in PUBLIC_HW_ARCHS:
        try:
            sdk.ClientRunner(hw_arch=name)
            ok.append(name)
        except Exception:
            pass
    return ok, "ClientRunner(hw_arch=...) probed over " + ", ".join(PUBLIC_HW_ARCHS)


def gpu():
    devices = sorted(d for d in glob.glob("/dev/nvidia[0-9]*"))
    listed = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            listed = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("GPU")]
        except (OSError, subprocess.SubprocessError):
            pass
    return {"visible": bool(devices or listed), "devices": devices, "nvidia_smi": listed,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def hailort():
    found = {"hailortcli": None, "hailo_platform": None}
    if shutil.which("hailortcli"):
        try:
            out = subprocess.run(["hailortcli", "--version"], capture_output=True, text=True, timeout=30)
            found["hailortcli"] = (out.stdout.strip() or out.stderr.strip()).splitlines()[-1] if out.returncode == 0 \
                else None
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    try:
        from importlib import metadata
        found["hailo_platform"] = metadata.version("hailort")
    except Exception:
        try:
            import hailo_platform
            found["hailo_platform"] = getattr(hailo_platform, "__version__", None)
        except Exception:  # absent, or its native part does not load here
            pass
    return found


def identify(hs, hw_arch, level):
    hs.ensure_writable_home()
    try:
        import hailo_sdk_client as sdk
    except ImportError as e:
        raise DfcNotFound(ROUTES.format(python=sys.executable, why=e)) from None
    ident = hs.sdk_identity()
    archs, how = accepted_hw_archs(sdk)
    toolchain = {"dfc": {"version": dfc_version(sdk), "module_version": ident["version"],
                         "test_double": ident["test_double"], "hw_archs": archs, "hw_archs_from": how}}
    if hw_arch not in archs:
        raise HwArchNotAccepted(f"hw_arch {hw_arch!r} is not accepted by DFC {toolchain['dfc']['version']} "
                                f"(it accepts: {', '.join(archs) or 'none found'}); set hw_arch to one of them")
    g = gpu()
    facts = dict(toolchain, gpu=g, hailort=hailort(), hw_arch=hw_arch, python=sys.executable)
    if ident["test_double"] and os.environ.get("HAILO_DOUBLE_ASSUME_GPU") == "1":
        facts["gpu"]["test_double_assumes_gpu"] = True
    if not g["visible"] and level > 0:
        # Printed as a `warning:` line, which heddle shows as soon as the stage ends, before optimize starts.
        print(f"warning: no GPU is visible where the DFC runs, and optimize asks for optimization level {level}: "
              "without a GPU the DFC reduces levels above 0 to 0 (dfc/optimize then fails, DegradedOptimization) "
              "or runs them on the CPU, hours for a large model. Give it a GPU (gpus = \"all\" and the NVIDIA "
              "container toolkit), or run without one: --set level=0 --set gpus=none", file=sys.stderr)
    facts["warnings"] = [] if g["visible"] or level == 0 else ["no GPU visible; optimisation level %d needs one" % level]
    return toolchain, facts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--out-toolchain", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    toolchain, facts = hs.run(lambda: identify(hs, a.hw_arch, a.level))
    with open(a.out_toolchain, "w") as f:
        json.dump(toolchain, f, indent=2, sort_keys=True)
    facts_file = os.environ.get("HEDDLE_FACTS_FILE")
    if facts_file:
        with open(facts_file, "w") as f:
            json.dump(facts, f, sort_keys=True)
    print(json.dumps({"dfc": toolchain["dfc"]["version"], "gpu": facts["gpu"]["visible"],
                      "hailort": facts["hailort"]}), file=sys.stderr)


if __name__ == "__main__":
    main()
