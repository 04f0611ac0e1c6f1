"""Inference contexts for the MeZO probe.

Every context maps x (N, H, W, C) float32 channels-last to outputs (N, H, W, C_out) float32 channels-last, so a
context can be compared against any float reference.

ort (onnxruntime, CPU; imported lazily):
  ORT_FLOAT         the float ONNX model.
  ORT_QDQ_EMULATED  the QDQ-quantised model with graph optimisations OFF: every DequantizeLinear -> float Conv ->
                    QuantizeLinear runs as written, i.e. quantisation emulated in float arithmetic.
  ORT_INTEGER       the same model with graph optimisations ON (ORT_ENABLE_ALL): ORT fuses DQ/Conv/Q into integer
                    kernels (QLinearConv) where it has them. It has them for 8-bit; for 16-bit activations the
                    fusion does not apply and this context executes the same float emulation — recorded in `info`
                    as the op types the optimised graph actually runs.
dfc (hailo_sdk_client inside the DFC image; imported lazily):
  any InferenceContext member by name (SDK_NATIVE, SDK_FP_OPTIMIZED, SDK_QUANTIZED, SDK_BIT_EXACT), entered once
  with runner.infer_context(...) and evaluated with runner.infer(ctx, {hn_input_name: x}). Follows the documented
  API; untested against the real DFC until someone runs it there.
numpy:
  NUMPY_FLOAT       float32 numpy evaluation of the authored graph from weights.npz (see mezo.py).
"""
import os
import tempfile

import numpy as np

from mezo import Context, NumpyFloatContext

ORT_CONTEXTS = ("ORT_FLOAT", "ORT_QDQ_EMULATED", "ORT_INTEGER")
DFC_CONTEXTS = ("SDK_NATIVE", "SDK_FP_OPTIMIZED", "SDK_QUANTIZED", "SDK_BIT_EXACT")


class OrtContext(Context):
    def __init__(self, model_path, name, threads=1):
        import onnxruntime as ort
        self.name = name
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        self._tmp = tempfile.TemporaryDirectory()
        opt_path = os.path.join(self._tmp.name, "optimized.onnx")
        if name == "ORT_INTEGER":
            # EXTENDED level holds the QDQ -> QLinear* fusions and stays hardware-neutral (no NCHWc layout ops).
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        elif name in ("ORT_QDQ_EMULATED",):
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        elif name == "ORT_FLOAT":
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        else:
            raise ValueError(f"unknown ort context {name!r}; known: {', '.join(ORT_CONTEXTS)}")
        so.optimized_model_filepath = opt_path
        self.sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        self.input_name = self.sess.get_inputs()[0].name
        # A model authored with a fixed batch (the entry's x is [1, 256, 1, 1]) is run frame by frame, as authored,
        # rather than rewritten to take a batch.
        first = self.sess.get_inputs()[0].shape[0]
        self.fixed_batch = first if isinstance(first, int) and first > 0 else None
        ops = []
        try:
            import onnx
            ops = [n.op_type for n in onnx.load(opt_path).graph.node]
        except Exception as e:  # the op list is informative only
            ops = [f"unavailable: {type(e).__name__}: {e}"]
        self._info = {"onnxruntime": ort.__version__, "graph_optimization_level": str(so.graph_optimization_level),
                      "executed_ops": ops, "integer_kernels": sorted({o for o in ops if o.startswith("QLinear")}),
                      "threads": int(threads), "fixed_batch": self.fixed_batch}

    @property
    def info(self):
        return self._info

    def forward(self, x):
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        if self.fixed_batch and x.shape[0] != self.fixed_batch:
            b = self.fixed_batch
            if x.shape[0] % b:
                raise ValueError(f"{x.shape[0]} inputs for a model with fixed batch {b}")
            y = np.concatenate([self.sess.run(None, {self.input_name: x[i:i + b]})[0]
                                for i in range(0, x.shape[0], b)])
        else:
            y = self.sess.run(None, {self.input_name: x})[0]
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


def hn_input_layers(runner):
    """HN input-layer names and per-sample shapes, read from the runner (not from the ONNX)."""
    hn = runner.get_hn_dict()
    layers = hn["layers"]
    names = [k for k, v in layers.items() if v.get("type") == "input_layer"]
    shapes = {k: list(layers[k]["input_shapes"][0][1:]) for k in names}
    return names, shapes


class DfcContext(Context):
    """DFC emulator context; documented API, untested on the real DFC until run there."""

    def __init__(self, har, name, hw_arch, helpers):
        helpers.ensure_writable_home()  # before the SDK is imported: it may write under ~
        from hailo_sdk_client import ClientRunner, InferenceContext
        # Names the TEST DOUBLE when tests/images/dfc-double's fake SDK ran, so its numbers are labelled.
        self.sdk = helpers.sdk_identity()
        if name not in DFC_CONTEXTS:
            raise ValueError(f"unknown dfc context {name!r}; known: {', '.join(DFC_CONTEXTS)}")
        self.name = name
        # The SDK calls this context makes, in order (consecutive repeats folded: "infer x12"); recorded in `info`
        # so a run record shows the API sequence that produced the numbers, on the real DFC or the test double.
        self.api_calls = []
        self.runner = ClientRunner(hw_arch=hw_arch, har=har)
        self._call("ClientRunner(hw_arch, har)")
        self.target = getattr(InferenceContext, name)
        self.input_names, self.input_shapes = hn_input_layers(self.runner)
        self._call("get_hn_dict")
        if len(self.input_names) != 1:
            raise ValueError(f"expected one HN input layer, found {self.input_names}")
        self._cm = None
        self.ctx = None

    def _call(self, what):
        if self.api_calls and self.api_calls[-1][0] == what:
            self.api_calls[-1][1] += 1
        else:
            self.api_calls.append([what, 1])

    def __enter__(self):
        self._cm = self.runner.infer_context(self.target)
        self.ctx = self._cm.__enter__()
        self._call(f"infer_context({self.name}).enter")
        return self

    def __exit__(self, *exc):
        cm, self._cm, self.ctx = self._cm, None, None
        r = cm.__exit__(*exc) if cm is not None else False
        self._call(f"infer_context({self.name}).exit")
        return r

    @property
    def info(self):
        return {"sdk": self.sdk, "hn_input_layers": self.input_names, "hn_input_shapes": self.input_shapes,
                "inference_context": self.name,
                "api_calls": [w if n == 1 else f"{w} x{n}" for w, n in self.api_calls]}

    def forward(self, x):
        want = self.input_shapes[self.input_names[0]]
        if list(x.shape[1:]) != list(want):
            raise ValueError(f"input {list(x.shape[1:])} does not match HN input shape {want}")
        out = self.runner.infer(self.ctx, {self.input_names[0]: np.ascontiguousarray(x, dtype=np.float32)})
        self._call("infer(ctx, {hn_input: NHWC float32})")
        if isinstance(out, (list, tuple)):
            out = out[0]
        if isinstance(out, dict):
            out = next(iter(out.values()))
        return np.asarray(out, dtype=np.float32).reshape(x.shape[0], *np.asarray(out).shape[1:])


def make_context(backend, name, *, quant=None, float_model=None, weights=None, hw_arch="hailo10h", threads=1,
                 helpers=None):
    if name == "NUMPY_FLOAT":
        if not weights:
            raise ValueError("NUMPY_FLOAT needs --weights")
        return NumpyFloatContext(weights)
    if backend == "ort":
        path = float_model if name == "ORT_FLOAT" else quant
        if not path:
            raise ValueError(f"context {name} needs a model path")
        return OrtContext(path, name, threads)
    if backend == "dfc":
        if not quant:
            raise ValueError(f"context {name} needs the quantised HAR")
        return DfcContext(quant, name, hw_arch, helpers)
    raise ValueError(f"unknown backend {backend!r} (ort, dfc; the device context lives in stages/hailo/infer)")
