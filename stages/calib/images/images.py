#!/usr/bin/env python3
"""calib/images — a folder of JPEG/PNG images -> float32 NHWC arrays (calibration and held-out), deterministically.

Order: file names sorted (byte order of the names), so the same folder gives the same arrays on every machine. Each
image: Pillow decode, convert("RGB") (greyscale and RGBA become RGB; alpha dropped; convert("L") for a model whose
input has one channel), resize with BILINEAR (stretch, or
shorter side to fit then centre crop), float32, * scale, (x - mean) / std per channel, channel order as asked.
images.json records each file's sha256 and where it went. Errors name the file; they are written as {class, message}
to $HEDDLE_ERROR_FILE.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

EXTS = (".jpg", ".jpeg", ".png")


class ImageSetError(Exception):
    """The folder or an image cannot be used as asked."""


def load_image(path, h, w, mode, scale, mean, std, channels, grey=False):
    from PIL import Image
    try:
        with Image.open(path) as im:
            im = im.convert("L" if grey else "RGB")
            if mode == "stretch":
                im = im.resize((w, h), Image.BILINEAR)
            else:
                k = max(h / im.height, w / im.width)
                rw, rh = max(w, round(im.width * k)), max(h, round(im.height * k))
                im = im.resize((rw, rh), Image.BILINEAR)
                left, top = (rw - w) // 2, (rh - h) // 2
                im = im.crop((left, top, left + w, top + h))
            x = np.asarray(im, dtype=np.float32)
            if grey:
                x = x[..., None]
    except OSError as e:
        raise ImageSetError(f"failed to read image {path}: {e}") from e
    if channels == "BGR":
        x = x[..., ::-1]
    return (x * scale - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def build(folder, size, meta, mode, scale, mean, std, channels, holdout, limit):
    if not os.path.isdir(folder):
        raise ImageSetError(f"{folder} is not a folder of images")
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(EXTS) and not n.startswith("."))
    if limit > 0:
        names = names[:limit]
    if not size:
        if not meta:
            raise ImageSetError("set `size = [height, width]` or bind the model's `meta`")
        shape = meta["input_shape_nchw"]
        if shape[1] not in (1, 3):
            raise ImageSetError(f"the model input has {shape[1]} channels; calib/images makes 3-channel (RGB, BGR) "
                                "or 1-channel (greyscale) images")
        size = shape[2:4]
        grey = shape[1] == 1
    else:
        grey = False
    h, w = int(size[0]), int(size[1])
    if len(mean) != 3 or len(std) != 3:
        raise ImageSetError("`mean` and `std` need 3 values (one per channel)")
    if grey:  # one channel: the three values must agree (the defaults do)
        if len(set(mean)) != 1 or len(set(std)) != 1:
            raise ImageSetError("the model takes greyscale images: give `mean` and `std` three equal values")
        mean, std = mean[:1], std[:1]
    if len(names) <= holdout:
        raise ImageSetError(f"{folder} has {len(names)} images ({', '.join(EXTS)}); need more than holdout = {holdout}")
    arrays, index = [], []
    for i, n in enumerate(names):
        p = os.path.join(folder, n)
        arrays.append(load_image(p, h, w, mode, scale, mean, std, channels, grey))
        index.append({"file": n, "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest(),
                      "set": "heldout" if i >= len(names) - holdout else "calib"})
    x = np.stack(arrays).astype(np.float32)
    cut = len(names) - holdout
    return x[:cut], x[cut:], {"layout": "NHWC", "dtype": "float32", "size": [h, w], "resize": mode, "scale": scale,
                              "mean": mean, "std": std, "channels": "grey" if grey else channels, "calib": cut,
                              "heldout": holdout, "images": index}


def read_meta(path):
    """The model's meta.json, or None: an optional input heddle did not bind renders as an empty string."""
    if not path:
        return None
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", required=True)
    ap.add_argument("--meta", default="")
    ap.add_argument("--size", default="[]")
    ap.add_argument("--resize", default="shorter-crop", choices=["stretch", "shorter-crop"])
    ap.add_argument("--scale", type=float, default=1 / 255)
    ap.add_argument("--mean", default="[0, 0, 0]")
    ap.add_argument("--std", default="[1, 1, 1]")
    ap.add_argument("--channels", default="RGB", choices=["RGB", "BGR"])
    ap.add_argument("--holdout", type=int, default=4)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out-calib", required=True)
    ap.add_argument("--out-heldout", required=True)
    ap.add_argument("--out-index", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    calib, held, index = hs.run(lambda: build(a.images, json.loads(a.size), read_meta(a.meta), a.resize, a.scale,
                                              json.loads(a.mean), json.loads(a.std), a.channels, a.holdout, a.limit))
    np.save(a.out_calib, calib)
    np.save(a.out_heldout, held)
    hs.write_json(a.out_index, index)
    print(f"calib {calib.shape}, held out {held.shape}, float32 NHWC", file=sys.stderr)


if __name__ == "__main__":
    main()
