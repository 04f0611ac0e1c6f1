"""hailo/deploy's parsers on output shaped like HailoRT 5.x's (FPS as a string; temperature with units)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stages", "hailo", "deploy"))
import deploy  # noqa: E402


def test_identify():
    text = ("Executing on device: 0000:01:00.0\nIdentifying board\nControl Protocol Version: 2\n"
            "Firmware Version: 5.1.0 (release,app,extended context switch buffer)\nLogger Version: 0\n"
            "Board Name: Hailo-10H\nDevice Architecture: HAILO10H\nSerial Number: N/A\n")
    i = deploy.parse_identify(text)
    assert i["architecture"] == "HAILO10H" and i["firmware"].startswith("5.1.0") and i["board_name"] == "Hailo-10H"


def test_run2_json():
    stats = {"time": "x", "inference_mode": "full_async",
             "network_groups": [{"name": "mezo", "full_hef_path": "/m.hef", "FPS": "1168.32",
                                 "hw_latency": 2.27, "overall_latency": 3.95}],
             "devices": [{"device_id": "0000:01:00.0",
                          "temperature": {"min": "38.7 C", "max": "41.7 C", "average": "40.1 C"}}]}
    r = deploy.parse_run2(stats)
    assert r["fps"] == 1168.32 and r["hw_latency_ms"] == 2.27 and r["overall_latency_ms"] == 3.95
    assert r["temperature_c"] == {"min": 38.7, "average": 40.1, "max": 41.7}
    assert r["power_w"] is None
