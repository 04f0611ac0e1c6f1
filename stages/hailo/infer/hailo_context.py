"""SDK_HAILO_HW context for the MeZO probe: the base graph runs on a Hailo device through HailoRT's InferModel API
(hailo_platform), the path documented as required on Hailo-10H (the older vstream API is reported to return
HAILO_NOT_IMPLEMENTED there). Flow (docs/hailo-toolchain.md §7): VDevice() -> create_infer_model(hef) ->
input/output set_format_type(FormatType.FLOAT32) BEFORE configure() -> configure() -> create_bindings(output_buffers)
-> input(name).set_buffer(frame) -> run([bindings...], timeout_ms) -> output(name).get_buffer().
Frames are per-sample HWC float32 (no batch axis); HailoRT (de)quantises on the host.
Follows the documented API; untested on real hardware until someone runs it there.
"""
import numpy as np


class HailoContext:
    name = "SDK_HAILO_HW"

    def __init__(self, hef, timeout_ms=10000):
        self.hef = hef
        self.timeout_ms = int(timeout_ms)
        self._vdev = None
        self._cfg_cm = None
        self.cim = None

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
        return {"api": "hailo_platform InferModel", "hef": str(self.hef), "input": self.in_name,
                "output": self.out_name, "input_shape": list(self.in_shape), "output_shape": list(self.out_shape),
                "format": "FLOAT32"}

    def forward(self, x):
        if tuple(x.shape[1:]) != self.in_shape:
            raise ValueError(f"input frame {tuple(x.shape[1:])} != HEF input shape {self.in_shape}")
        bindings = []
        for frame in x:
            b = self.cim.create_bindings(output_buffers={self.out_name: np.empty(self.out_shape, np.float32)})
            b.input(self.in_name).set_buffer(np.ascontiguousarray(frame, dtype=np.float32))
            bindings.append(b)
        self.cim.run(bindings, self.timeout_ms)
        return np.stack([np.asarray(b.output(self.out_name).get_buffer(), np.float32) for b in bindings])
