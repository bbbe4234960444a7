"""Image files as requests carry them: each format told by its first bytes, its size read from its header alone and
checked against the limits, a file cut short refused (`check_image`, microseconds, while the request is read), and
the pixels decoded to RGB (`decode_pixels`, in the runtime)."""

from __future__ import annotations

import io
import warnings

import cv2
import numpy as np
import PIL.Image

from chariot_support.errors import BadRequest
from chariot_support.settings import DEFAULTS, EngineSettings

# The start of each image format the decoder reads, to tell raw image bytes from base64 ones.
IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM", b"II*\x00", b"MM\x00*", b"RIFF")

# What OpenCV decodes, by the name Pillow gives each format it reads from the header: a file Pillow knows that OpenCV
# cannot decode (an icon, a Targa) is refused with the rest, before the request waits for a thread.
DECODED_FORMATS = frozenset(("JPEG", "MPO", "PNG", "BMP", "TIFF", "WEBP", "GIF", "PPM", "JPEG2000", "AVIF"))
BYTES_PER_PIXEL = 3  # decoded images are RGB uint8

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers, which carry the image's height and width (C4, C8 and CC are other segments).
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _quick_header(encoded: bytes) -> tuple[int, int, str] | None:
    """Width, height and format of a well-formed PNG or JPEG from its first bytes, in microseconds; None for
    anything else, which Pillow then reads."""
    if encoded.startswith(_PNG_SIGNATURE) and encoded[12:16] == b"IHDR" and len(encoded) >= 24:
        return int.from_bytes(encoded[16:20], "big"), int.from_bytes(encoded[20:24], "big"), "PNG"
    if not encoded.startswith(b"\xff\xd8"):
        return None
    position, size = 2, len(encoded)
    while position + 9 <= size and encoded[position] == 0xFF:
        marker = encoded[position + 1]
        if marker in _JPEG_FRAMES:
            height = int.from_bytes(encoded[position + 5 : position + 7], "big")
            return int.from_bytes(encoded[position + 7 : position + 9], "big"), height, "JPEG"
        if marker == 0xFF:
            position += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD9 or marker == 0xDA:
            return None  # a scan or a stand-alone marker before any frame: not a layout read here
        else:
            position += 2 + int.from_bytes(encoded[position + 2 : position + 4], "big")
    return None


def image_header(
    encoded: bytes, where: str, limits: EngineSettings = DEFAULTS, item: str = ""
) -> tuple[int, int, str | None]:
    """Width, height and format of an image file, read from its header alone and checked against the limits.
    `where` names the input in messages, `item` the image within it (by default `where`'s data[0])."""
    quick = _quick_header(encoded)
    if quick is not None and quick[0] and quick[1]:  # Pillow has its own word for a file of no pixels
        width, height, kind = quick
        cap = 2 * PIL.Image.MAX_IMAGE_PIXELS
        if width * height > cap:  # what Pillow says of such a file
            raise BadRequest(
                f"{where}: the image has more than {cap} pixels; this engine accepts at most "
                f"{min(cap, limits.max_image_pixels)}"
            )
        return _checked(width, height, kind, where, limits)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
            with PIL.Image.open(io.BytesIO(encoded)) as header:
                width, height = header.size  # read from the header alone: no pixels decoded yet
                kind = header.format
    except PIL.Image.DecompressionBombError:  # Pillow's own cap, reached before the size is returned
        cap = 2 * PIL.Image.MAX_IMAGE_PIXELS
        raise BadRequest(
            f"{where}: the image has more than {cap} pixels; this engine accepts at most "
            f"{min(cap, limits.max_image_pixels)}"
        ) from None
    except (PIL.UnidentifiedImageError, OSError, ValueError):
        raise _not_an_image(where, item) from None
    if kind not in DECODED_FORMATS:
        raise _not_an_image(where, item)
    return _checked(width, height, kind, where, limits)


def _not_an_image(where: str, item: str) -> BadRequest:
    return BadRequest(
        f"{item or where + ': data[0]'} is not an image this engine can read (JPEG, PNG, BMP, TIFF, WebP, GIF)"
    )


def _checked(
    width: int, height: int, kind: str | None, where: str, limits: EngineSettings
) -> tuple[int, int, str | None]:
    if width * height > limits.max_image_pixels:
        raise BadRequest(
            f"{where}: the image is {width}x{height} pixels, more than the {limits.max_image_pixels} this engine accepts"
        )
    if width == 0 or height == 0:
        raise BadRequest(f"{where}: the image has no pixels ({width}x{height})")
    return width, height, kind


def check_image(
    encoded: bytes, where: str, limits: EngineSettings = DEFAULTS, item: str = ""
) -> tuple[int, int, str | None]:
    """Width, height and format of an image file, checked without decoding a pixel: a format OpenCV decodes, within
    the limits, and whole (a JPEG's end marker, a PNG's IEND chunk, a GIF's trailer). Microseconds: requests are
    checked so while they are read, before they wait for anything."""
    width, height, kind = image_header(encoded, where, limits, item)
    if not _complete(encoded, kind):
        raise BadRequest(f"{where}: the {kind} file is cut short (it has no end marker); send the whole file")
    return width, height, kind


def decoded_bytes(sizes: list[int]) -> int:
    """What decoding images of `sizes` pixels holds at its peak: their pixels, and a second copy of the largest,
    which OpenCV decodes into a buffer of its own and then copies out."""
    return (sum(sizes) + max(sizes, default=0)) * BYTES_PER_PIXEL


def decode_image(encoded: bytes, where: str, limits: EngineSettings = DEFAULTS, item: str = "") -> np.ndarray:
    """Check an image file and decode it to RGB uint8 pixels (H, W, 3), honouring EXIF orientation."""
    _, _, kind = check_image(encoded, where, limits, item)
    return decode_pixels(encoded, kind, where, item)


def decode_pixels(encoded: bytes, kind: str | None, where: str, item: str = "") -> np.ndarray:
    """The RGB uint8 pixels (H, W, 3) of a file `check_image` passed as of format `kind`."""
    buffer = np.frombuffer(encoded, np.uint8)
    pixels = cv2.imdecode(buffer, cv2.IMREAD_COLOR_RGB)
    if pixels is None and kind == "TIFF":
        pixels = _float_tiff(buffer)
    if pixels is None:
        raise BadRequest(f"{item or where + ': data[0]'} could not be decoded as an image; is the file complete?")
    return pixels


def _float_tiff(buffer: np.ndarray) -> np.ndarray | None:
    """RGB pixels of a TIFF of floating-point samples (Pillow's mode F: measurements, masks), which OpenCV reads only
    as they are; None for any other file. Samples are 0-1 when none is above 1, else 0-255; beyond is clipped and
    NaN is 0."""
    samples = cv2.imdecode(buffer, cv2.IMREAD_UNCHANGED)
    if samples is None or samples.dtype.kind != "f":
        return None
    samples = np.nan_to_num(samples, copy=False, nan=0.0, posinf=255.0, neginf=0.0)
    if samples.max(initial=0.0) <= 1.0:
        samples *= 255
    pixels = np.clip(np.rint(samples, out=samples), 0, 255, out=samples).astype(np.uint8)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if pixels.ndim == 2:
        return cv2.cvtColor(pixels, cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(pixels, cv2.COLOR_BGRA2RGB if pixels.shape[2] == 4 else cv2.COLOR_BGR2RGB)


def _complete(encoded: bytes, kind: str | None) -> bool:
    """Whether a JPEG, PNG, WebP or GIF file reaches its end. OpenCV decodes a cut-off JPEG, PNG or WebP without
    complaint, filling the missing rows with grey; a GIF without its trailer it refuses, but only once the request
    has waited for a thread, and with its error printed to stderr, past the engine's JSON log. This looks only at
    markers and lengths, never at pixels, so it costs microseconds."""
    if kind == "JPEG":
        # Walk the segments to the first start-of-scan; the end-of-image marker must follow it. Scan data cannot
        # hold FF D9, an EXIF thumbnail's markers lie inside a segment before it, and data appended after the
        # image (motion photos) does not hide a missing end.
        position, size = 2, len(encoded)
        while position + 4 <= size:
            if encoded[position] != 0xFF:
                return True  # not a layout this check knows; the decoder has the last word
            marker = encoded[position + 1]
            if marker == 0xDA:
                # Most files end with the marker: look at the tail before scanning all of the scan data for it.
                tail = max(position, size - 64)
                return encoded.find(b"\xff\xd9", tail) != -1 or encoded.find(b"\xff\xd9", position) != -1
            if marker == 0xFF:
                position += 1
            elif marker == 0x01 or 0xD0 <= marker <= 0xD8:
                position += 2
            else:
                position += 2 + int.from_bytes(encoded[position + 2 : position + 4], "big")
        return False
    if kind == "PNG":
        return encoded.rfind(b"IEND\xaeB`\x82") != -1  # the IEND chunk, whose CRC never varies
    if kind == "WEBP":
        return len(encoded) >= 8 + int.from_bytes(encoded[4:8], "little")
    if kind == "GIF":
        # The last block's terminator (00) and the trailer (3B) end the file, a few bytes of zero padding aside
        # (looked for in the last 64 bytes, without copying the file).
        tail = encoded[-64:]
        end = tail.rfind(b"\x00;")
        return end != -1 and not tail[end + 2 :].strip(b"\x00")
    return True
