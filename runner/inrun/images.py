"""What a client would decode an image a run returns to: its type and its size in pixels, read from its
headers, never decoded. Pure functions over bytes; standard library only.

Used inside the run (`harvest`, which is handed this module by the bootstrap, and the figures' cap) and
by the server, which judges every image again (`runner.execution.report`): a report the code wrote
itself could list anything.
"""

from __future__ import annotations

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Images MCP clients show (ImageContent), known by their first bytes (a WebP's say RIFF, then WEBP at 8).
IMAGE_TYPES = (
    (PNG_MAGIC, "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"RIFF", "image/webp"),
)
# A client decodes an image whole, at about 4 bytes a pixel, whatever its size in bytes (a PNG of
# 30,000 x 30,000 px can be 110 KB, and 3.4 GiB decoded): past this many pixels (16 MB decoded) it
# does not come back as an image. Figures are drawn within it (`figures.Figures`, given it by the bootstrap).
MAX_PIXELS = 4_000_000


def image_type(data: bytes) -> str | None:
    """The MIME type of an image a client would show, from its first bytes; None for anything else."""
    for magic, mime in IMAGE_TYPES:
        if data.startswith(magic) and (mime != "image/webp" or data[8:12] == b"WEBP"):
            return mime
    return None


def image_size(data: bytes, mime: str) -> tuple[int, int]:
    """Width and height as the image's headers give them, nothing decoded: a PNG's IHDR, a GIF's
    screen and every frame's extent on it, a JPEG's largest frame header, a WebP's VP8X, VP8 or VP8L
    header; (0, 0) where they cannot be read."""
    if mime == "image/png":
        return _png_size(data)
    if mime == "image/gif":
        return _gif_size(data)
    if mime == "image/jpeg":
        return _jpeg_size(data)
    return _webp_size(data)


def refused(width: int, height: int) -> str | None:
    """Why an image of this size does not come back as one (None: it does)."""
    if width <= 0 or height <= 0:
        return "an image whose headers give no size"
    if width * height > MAX_PIXELS:
        return f"{width}x{height} px: over the {MAX_PIXELS:,}-pixel cap for images"
    return None


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return 0, 0
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _gif_size(data: bytes) -> tuple[int, int]:
    """The logical screen, grown to every frame's extent (decoders such as Pillow grow it so). A byte
    that starts no block is stepped over, as Pillow steps over it: a frame after it still counts."""
    if len(data) < 13:
        return 0, 0
    width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    at = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)  # past the global colour table
    while at < len(data) and data[at] != 0x3B:  # the trailer
        if data[at] == 0x2C and at + 10 <= len(data):  # an image descriptor
            left, top = int.from_bytes(data[at + 1 : at + 3], "little"), int.from_bytes(data[at + 3 : at + 5], "little")
            width = max(width, left + int.from_bytes(data[at + 5 : at + 7], "little"))
            height = max(height, top + int.from_bytes(data[at + 7 : at + 9], "little"))
            packed = data[at + 9]
            at += 10 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0) + 1  # its colour table, LZW size
        elif data[at] == 0x21:  # an extension: its label, then sub-blocks
            at += 2
        else:
            at += 1
            continue
        while at < len(data) and data[at]:  # sub-blocks, each its length and bytes, to an empty one
            at += 1 + data[at]
        at += 1
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The largest start of frame before the scan begins: a decoder may take any of them (Pillow the last)."""
    at, largest = 2, (0, 0)
    while at + 9 < len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # fill
            at += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
        elif marker == 0xDA:  # start of scan: entropy-coded data follows, no more headers
            break
        else:
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
                size = int.from_bytes(data[at + 7 : at + 9], "big"), int.from_bytes(data[at + 5 : at + 7], "big")
                largest = max(largest, size, key=lambda pair: pair[0] * pair[1])
            at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return largest


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:  # the canvas, 24 bits each, less one
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:  # 14 bits each, less one
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1
    return 0, 0
