"""TEST DOUBLE — not the Hailo SDK. Names as used by public code that calls the real SDK."""


class States:
    UNINITIALIZED = "uninitialized"
    HAILO_MODEL = "hailo_model"
    FP_OPTIMIZED_MODEL = "fp_optimized_model"
    QUANTIZED_MODEL = "quantized_model"
    COMPILED_MODEL = "compiled_model"


class InferenceContext:
    SDK_NATIVE = "SDK_NATIVE"
    SDK_FP_OPTIMIZED = "SDK_FP_OPTIMIZED"
    SDK_QUANTIZED = "SDK_QUANTIZED"
    SDK_BIT_EXACT = "SDK_BIT_EXACT"
    SDK_HAILO_HW = "SDK_HAILO_HW"
    ALL = ("SDK_NATIVE", "SDK_FP_OPTIMIZED", "SDK_QUANTIZED", "SDK_BIT_EXACT", "SDK_HAILO_HW")


class CalibrationDataType:
    auto = "auto"
    np_array = "np_array"


SUPPORTED_HW_ARCHS = ["hailo15h", "hailo15m", "hailo15l", "hailo10h", "hailo10p", "hailo12l"]

# The DFC 5.3.0 PrecisionMode enum as dumped in the logbook entry.
PRECISION_MODES = ["a8_w8", "a8_w4", "a16_w16", "a16_w8", "a16_w4", "a8_w4_exp", "a16_w16_non_zero", "native",
                   "a8_w8_a8", "a8_w8_a16", "a8_w4_a8", "a8_w4_a16", "a16_w16_a8", "a16_w16_a16", "a16_w8_a8",
                   "a16_w8_a16", "a16_w4_a16", "a16_w4_a8"]
