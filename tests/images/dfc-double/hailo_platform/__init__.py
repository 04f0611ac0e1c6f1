"""TEST DOUBLE — not HailoRT. A numpy-only stand-in for `hailo_platform`'s InferModel API, for checking that
hailo/infer calls it in the documented order: VDevice() -> create_infer_model(hef) -> input/output
set_format_type(FLOAT32) BEFORE configure() -> create_bindings(output_buffers=...) -> input(name).set_buffer ->
wait_for_async_ready() -> run_async([bindings]) -> job.wait() -> output(name).get_buffer(). Reads only HEFs written by
the hailo_sdk_client double. Calls are appended to $HAILO_DOUBLE_TRACE (JSON lines) when set. Numbers mean nothing.

The async queue, as on the local runner: get_async_queue_size() frames ($HAILO_DOUBLE_QUEUE_SIZE, default 2) may be
in flight; a job leaves the queue when it is waited for or when wait_for_async_ready() makes room (the device
finishing the oldest frame); one more run_async — or a run() over more bindings than the queue holds — raises
HailoRTException("HAILO_QUEUE_IS_FULL"). Jobs never finish on their own here, as if the device were slower than
the host, so a caller that does not wait is caught.
$HAILO_DOUBLE_PLATFORM_VERSION sets the version it claims (default 5.2.0); below 4.18 it lacks the InferModel API,
as the real binding did."""
import contextlib
import json
import os

import numpy as np

TEST_DOUBLE = "TEST DOUBLE — not HailoRT"
# Matches the version the hailortcli double prints, as a real wheel must match its HailoRT.
__version__ = os.environ.get("HAILO_DOUBLE_PLATFORM_VERSION", "5.2.0")
TRACE = []


def _rec(name, **kw):
    e = {"call": name, "kwargs": {k: (list(v.shape) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}}
    TRACE.append(e)
    p = os.environ.get("HAILO_DOUBLE_TRACE")
    if p:
        with open(p, "a") as f:
            f.write(json.dumps(e, default=repr) + "\n")


class HailoRTException(Exception):
    pass


class FormatType:
    AUTO = "AUTO"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    FLOAT32 = "FLOAT32"


class _Stream:
    def __init__(self, name, shape, default):
        self.name, self.shape, self.format_type = name, tuple(shape), default

    def set_format_type(self, t):
        _rec("set_format_type", stream=self.name, type=t)
        self.format_type = t


class InferModel:
    def __init__(self, hef):
        with open(hef) as f:
            self._hef = json.load(f)
        if self._hef.get("kind") != "HEF":
            raise HailoRTException("TEST DOUBLE: not a test-double HEF")
        _, c, h, w = self._hef["input_nchw"]
        from hailo_sdk_client import _out_channels
        net = self._hef["net_name"]
        self._in = _Stream(f"{net}/input_layer1", (h, w, c), FormatType.UINT16)
        self._out = _Stream(f"{net}/output_layer1", (h, w, _out_channels(c)), FormatType.UINT16)
        self.batch = 1

    @property
    def input_names(self):
        return [self._in.name]

    @property
    def output_names(self):
        return [self._out.name]

    def input(self, name=None):
        return self._in

    def output(self, name=None):
        return self._out

    def set_batch_size(self, n):
        _rec("set_batch_size", n=n)
        self.batch = n

    @contextlib.contextmanager
    def configure(self):
        _rec("configure", input_format=self._in.format_type, output_format=self._out.format_type)
        yield _Configured(self)


class _Bindings:
    def __init__(self, model, outs):
        self._m, self._outs, self._in = model, outs, None

    def input(self, name=None):
        b = self

        class _I:
            def set_buffer(self, arr):
                if b._m._in.format_type != FormatType.FLOAT32 or arr.dtype != np.float32:
                    raise HailoRTException("TEST DOUBLE: buffer size mismatch (set FLOAT32 before configure())")
                b._in = arr
        return _I()

    def output(self, name=None):
        b = self

        class _O:
            def get_buffer(self):
                return b._outs[b._m._out.name]
        return _O()


class _Job:
    def __init__(self, cim, bindings):
        self._cim, self._bindings, self.done = cim, bindings, False

    def _finish(self):
        if not self.done:
            from hailo_sdk_client import pseudo_forward
            h = self._cim._m._hef
            for b in self._bindings:
                y = pseudo_forward(h["onnx_sha256"], b._in[None], h["precision_mode"])[0]
                b._outs[self._cim._m._out.name][...] = y
            self.done = True
            self._cim._in_flight.remove(self)

    def wait(self, timeout_ms):
        _rec("job.wait", timeout_ms=timeout_ms)
        self._finish()


class _Configured:
    def __init__(self, model):
        self._m = model
        self._in_flight = []
        self.queue_size = int(os.environ.get("HAILO_DOUBLE_QUEUE_SIZE", "2"))

    def create_bindings(self, output_buffers=None):
        _rec("create_bindings", output_buffers=sorted((output_buffers or {}).keys()))
        return _Bindings(self._m, output_buffers)

    def get_async_queue_size(self):
        _rec("get_async_queue_size")
        return self.queue_size

    def wait_for_async_ready(self, timeout_ms=1000, frames_count=1):
        _rec("wait_for_async_ready", timeout_ms=timeout_ms, frames_count=frames_count)
        if frames_count > self.queue_size:
            raise HailoRTException(f"TEST DOUBLE: HAILO_INVALID_ARGUMENT: {frames_count} frames > queue size "
                                   f"{self.queue_size}")
        # The device finishes the oldest frames until there is room.
        while len(self._in_flight) + frames_count > self.queue_size:
            self._in_flight[0]._finish()

    def run_async(self, bindings, callback=None):
        _rec("run_async", n=len(bindings), in_flight=len(self._in_flight))
        if len(self._in_flight) + 1 > self.queue_size:
            raise HailoRTException(f"TEST DOUBLE: HAILO_QUEUE_IS_FULL: {len(self._in_flight)} jobs in flight, "
                                   f"async queue size {self.queue_size}; call wait_for_async_ready first")
        job = _Job(self, bindings)
        self._in_flight.append(job)
        return job

    def run(self, bindings, timeout):
        """Submits one async job per binding, then waits: more bindings than the queue holds overflow it."""
        _rec("run", n=len(bindings), timeout=timeout)
        jobs = []
        for b in bindings:
            if len(self._in_flight) + 1 > self.queue_size:
                raise HailoRTException(f"TEST DOUBLE: HAILO_QUEUE_IS_FULL: run() over {len(bindings)} bindings, "
                                       f"async queue size {self.queue_size}")
            job = _Job(self, [b])
            self._in_flight.append(job)
            jobs.append(job)
        for j in jobs:
            j._finish()


class VDevice:
    def __init__(self, params=None):
        _rec("VDevice")

    @staticmethod
    def create_params():
        return type("P", (), {})()

    def create_infer_model(self, hef):
        _rec("create_infer_model", hef=str(hef))
        return InferModel(hef)

    def release(self):
        _rec("release")

    def __enter__(self):
        return self

    def __exit__(self, *e):
        self.release()
        return False


def _major_minor(v):
    import re
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# The InferModel API and its async queue calls (VDevice.create_infer_model, ConfiguredInferModel.get_async_queue_size,
# wait_for_async_ready, run_async) first appear in HailoRT 4.18.0's pyhailort.py; a double claiming an older version
# has none of them, as the real binding had not.
if _major_minor(__version__) < (4, 18):
    del VDevice.create_infer_model
    for _name in ("get_async_queue_size", "wait_for_async_ready", "run_async"):
        delattr(_Configured, _name)
