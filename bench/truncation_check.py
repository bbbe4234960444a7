"""What the cut-off-file check costs beside decoding, for a 1920x1080 image as JPEG (baseline and progressive), PNG
and WebP. From the template root: `PYTHONPATH="{{cookiecutter.engine_name}}/src" python bench/truncation_check.py`."""

import io
import statistics
import time

import cv2
import numpy as np
import PIL.Image

from chariot_support.errors import BadRequest
from chariot_support.protocols.images import _complete, decode_image

rng = np.random.default_rng(0)
image = cv2.GaussianBlur(rng.integers(0, 255, (1080, 1920, 3), dtype=np.uint8), (15, 15), 0)
FORMATS = [
    ("JPEG", ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 90]),
    ("progressive JPEG", ".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
    ("PNG", ".png", []),
    ("WebP", ".webp", []),
]


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


for label, extension, options in FORMATS:
    raw = cv2.imencode(extension, image, options)[1].tobytes()
    kind = PIL.Image.open(io.BytesIO(raw)).format
    check = median_seconds(lambda raw=raw, kind=kind: _complete(raw, kind), 2000)
    decode = median_seconds(lambda raw=raw: cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB), 9)
    refused = 0
    cuts = [len(raw) * percent // 100 for percent in (10, 50, 90, 99)] + [len(raw) - 2]
    for end in cuts:
        try:
            decode_image(raw[:end], "input 'x'")
        except BadRequest:
            refused += 1
    print(
        f"{label:17} {len(raw) / 1e6:.1f} MB: check {check * 1e6:6.1f} us, decode {decode * 1e3:5.1f} ms "
        f"({check / decode:.3%} of it); cut files refused {refused}/{len(cuts)}"
    )
