"""SDK_HAILO_HW context for the MeZO probe: the base graph runs on a Hailo device through HailoRT's InferModel API
(hailo_platform), the path required on Hailo-10H (the older vstream API and the plain C API's network configuration
return HAILO_NOT_IMPLEMENTED there: vdevice_hrpc_client.cpp). Flow (docs/hailo-toolchain.md §7): VDevice() ->
create_infer_model(hef) -> input/output set_format_type(FormatType.FLOAT32) BEFORE configure() -> configure() ->
per frame: create_bindings(output_buffers) -> input(name).set_buffer(frame) -> wait_for_async_ready() -> run_async()
-> job.wait() -> output(name).get_buffer().

At most get_async_queue_size() frames are in flight: before each run_async the context waits for a free slot
(wait_for_async_ready), and when the queue is full it waits for the oldest job first — submitting more returns
HAILO_QUEUE_IS_FULL on the local runner. Frames are per-sample HWC float32 (no batch axis); HailoRT (de)quantises on
the host. Follows the documented API; untested on real hardware until someone runs it there.
"""
import collections
import re
import shutil
import subprocess

import numpy as np


class HailoPlatformError(RuntimeError):
    """hailo_platform is missing, lacks the InferModel API, or does not match the installed HailoRT."""


def _major_minor(v):
    m = re.search(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def hailortcli_version(hailortcli="hailortcli"):
    """`hailortcli --version` as printed ("HailoRT-CLI version 5.2.0"), or None when there is no hailortcli."""
    exe = shutil.which(hailortcli)
    if not exe:
        return None
    p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr).strip() or None


# The first HailoRT whose python binding has the calls this context makes: VDevice.create_infer_model,
# ConfiguredInferModel.get_async_queue_size / wait_for_async_ready / run_async all arrive in 4.18.0
# (hailort libhailort/bindings/python/platform/hailo_platform/pyhailort/pyhailort.py: absent at v4.17.1, present at
# v4.18.0).
MIN_HAILORT = (4, 18)


def check_platform(hailortcli="hailortcli"):
    """Import hailo_platform and check it before touching a device: present, at least HailoRT 4.18 (the async queue
    calls), has the InferModel API, and its version matches HailoRT's (the wheel's _pyhailort must equal the
    library). -> identity dict; raises HailoPlatformError."""
    import sys
    try:
        import hailo_platform
    except ImportError as e:
        raise HailoPlatformError(
            f"hailo_platform is not importable by {sys.executable} ({e}). It is not on PyPI: install the HailoRT "
            "python wheel (hailort-<version>-cp3X-...whl from Hailo's Developer Zone) that matches the installed "
            "HailoRT, into this interpreter, or point the stage's `python` param at one that has it") from e
    version = getattr(hailo_platform, "__version__", None)
    mm = _major_minor(version)
    if mm is None or mm < MIN_HAILORT:
        raise HailoPlatformError(
            f"hailo_platform {version} is older than HailoRT {MIN_HAILORT[0]}.{MIN_HAILORT[1]}: this stage uses "
            "ConfiguredInferModel.get_async_queue_size, wait_for_async_ready and run_async, which arrived in 4.18; "
            "install HailoRT 4.18 or later and its matching wheel (5.x for Hailo-10H)")
    vdevice = getattr(hailo_platform, "VDevice", None)
    if vdevice is None or not hasattr(vdevice, "create_infer_model"):
        raise HailoPlatformError(
            f"hailo_platform {version} has no VDevice.create_infer_model: the InferModel API (HailoRT 4.18+) is "
            "required, and on Hailo-10H HailoRT 5.x; install the matching wheel")
    cli = hailortcli_version(hailortcli)
    if cli is not None and _major_minor(cli) != mm:
        raise HailoPlatformError(
            f"hailo_platform {version} does not match HailoRT ({cli!r}): install the wheel of the same version")
    return {"module": "hailo_platform", "version": version, "hailortcli_version": cli,
            "test_double": getattr(hailo_platform, "TEST_DOUBLE", None)}


class HailoContext:
    name = "SDK_HAILO_HW"

    def __init__(self, hef, timeout_ms=10000, hailortcli="hailortcli"):
        self.hef = hef
        self.timeout_ms = int(timeout_ms)
        self.platform = check_platform(hailortcli)
        self._vdev = None
        self._cfg_cm = None
        self.cim = None
        self.queue_size = None
        self.max_in_flight = 0

    def __enter__(self):
        from hailo_platform import FormatType, VDevice
        self._vdev = VDevice()
        self.model = self._vdev.create_infer_model(self.hef)
        self.in_name = self.model.input_names[0]
        self.out_name = self.model.output_names[0]
        self.model.input(self.in_name).set_format_type(FormatType.FLOAT32)
        self.model.output(self.out_name).set_format_type(FormatType.FLOAT32)
        self.in_shape = tuple(self.model.input(self.in_name).shape)
        self.out_shape = tuple(self.model.output(self.out_name).shape)
        self._cfg_cm = self.model.configure()
        self.cim = self._cfg_cm.__enter__()
        self.queue_size = int(self.cim.get_async_queue_size())
        return self

    def __exit__(self, *exc):
        try:
            if self._cfg_cm is not None:
                self._cfg_cm.__exit__(*exc)
        finally:
            if self._vdev is not None and hasattr(self._vdev, "release"):
                self._vdev.release()
        return False

    @property
    def info(self):
        return {"api": "hailo_platform InferModel (run_async)", "hef": str(self.hef), "input": self.in_name,
                "output": self.out_name, "input_shape": list(self.in_shape), "output_shape": list(self.out_shape),
                "format": "FLOAT32", "async_queue_size": self.queue_size, "max_in_flight": self.max_in_flight,
                "platform": self.platform}

    def forward(self, x):
        if tuple(x.shape[1:]) != self.in_shape:
            raise ValueError(f"input frame {tuple(x.shape[1:])} != HEF input shape {self.in_shape}")
        outs = [None] * x.shape[0]
        in_flight = collections.deque()  # (index, job, bindings)

        def finish_oldest():
            i, job, b = in_flight.popleft()
            job.wait(self.timeout_ms)
            outs[i] = np.array(b.output(self.out_name).get_buffer(), np.float32)

        for i, frame in enumerate(x):
            if len(in_flight) >= self.queue_size:
                finish_oldest()
            b = self.cim.create_bindings(output_buffers={self.out_name: np.empty(self.out_shape, np.float32)})
            b.input(self.in_name).set_buffer(np.ascontiguousarray(frame, dtype=np.float32))
            self.cim.wait_for_async_ready(timeout_ms=self.timeout_ms)
            in_flight.append((i, self.cim.run_async([b]), b))
            self.max_in_flight = max(self.max_in_flight, len(in_flight))
        while in_flight:
            finish_oldest()
        return np.stack(outs)
