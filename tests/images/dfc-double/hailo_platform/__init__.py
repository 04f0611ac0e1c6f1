"""TEST DOUBLE — not HailoRT. A numpy-only stand-in for `hailo_platform`'s InferModel API, for checking that
hailo/infer calls it in the documented order: VDevice() -> create_infer_model(hef) -> input/output
set_format_type(FLOAT32) BEFORE configure() -> create_bindings(output_buffers=...) -> input(name).set_buffer ->
run([bindings], timeout) -> output(name).get_buffer(). Reads only HEFs written by the hailo_sdk_client double.
Calls are appended to $HAILO_DOUBLE_TRACE (JSON lines) when set. Numbers mean nothing."""
import contextlib
import json
import os

import numpy as np

TEST_DOUBLE = "TEST DOUBLE — not HailoRT"
__version__ = "0.0.0+testdouble"
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


class _Configured:
    def __init__(self, model):
        self._m = model

    def create_bindings(self, output_buffers=None):
        _rec("create_bindings", output_buffers=sorted((output_buffers or {}).keys()))
        return _Bindings(self._m, output_buffers)

    def run(self, bindings, timeout):
        _rec("run", n=len(bindings), timeout=timeout)
        from hailo_sdk_client import pseudo_forward
        h = self._m._hef
        for b in bindings:
            y = pseudo_forward(h["onnx_sha256"], b._in[None], h["precision_mode"])[0]
            b._outs[self._m._out.name][...] = y


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
