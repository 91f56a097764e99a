"""Headless Chromium (Debian's chromium + chromium-driver) driven by selenium, and a small PNG
reader so the tests can look at screenshots the way a person would: is there a chart, is
there text, or is it blank?"""

from __future__ import annotations

import shutil
import struct
import zlib
from collections import Counter
from dataclasses import dataclass

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

WIDTH, HEIGHT = 1280, 1000


def chromium() -> webdriver.Chrome:
    """A headless Chromium at 1x scale (CSS pixels are screenshot pixels). Root needs
    --no-sandbox; containers have a small /dev/shm."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        raise RuntimeError("chromium and chromium-driver are missing: apt-get install chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},{HEIGHT}", "--force-device-scale-factor=1",
                "--hide-scrollbars", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    browser = webdriver.Chrome(service=Service(driver), options=opts)
    browser.set_page_load_timeout(20)
    return browser


@dataclass
class Image:
    width: int
    height: int
    pixels: list[tuple[int, int, int]]  # row-major RGB

    def crop(self, x: int, y: int, w: int, h: int) -> Image:
        x, y = max(0, x), max(0, y)
        w, h = min(w, self.width - x), min(h, self.height - y)
        rows = [self.pixels[(y + j) * self.width + x:(y + j) * self.width + x + w] for j in range(h)]
        return Image(w, h, [p for row in rows for p in row])

    def count_near(self, hex_colour: str, tolerance: int = 40) -> int:
        """Pixels within `tolerance` (per channel) of the colour, e.g. a chart's series."""
        r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        return sum(1 for pr, pg, pb in self.pixels
                   if abs(pr - r) <= tolerance and abs(pg - g) <= tolerance and abs(pb - b) <= tolerance)

    def ink(self) -> float:
        """Share of pixels that differ from the most common (background) colour."""
        (background, n), = Counter(self.pixels).most_common(1)
        return 1 - n / len(self.pixels)

    def dark(self, limit: int = 200) -> int:
        """Pixels dark enough to be text (r + g + b below limit; grey labels need ~450)."""
        return sum(1 for r, g, b in self.pixels if r + g + b < limit)


def read_png(data: bytes) -> Image:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, pixels, i = bytearray(stride), [], 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):  # undo the PNG filter of this line
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(tuple(line[x:x + 3]) for x in range(0, stride, bpp))
        prev = line
    return Image(width, height, pixels)


def element_image(browser: webdriver.Chrome, element) -> Image:
    """What the element looks like on screen (scrolled into view, then captured)."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    return read_png(element.screenshot_as_png)


def stack(images: list[Image]) -> Image:
    """Images one above the other (left-aligned, white where one is narrower)."""
    width = max(i.width for i in images)
    pixels: list[tuple[int, int, int]] = []
    for img in images:
        for y in range(img.height):
            pixels.extend(img.pixels[y * img.width:(y + 1) * img.width])
            pixels.extend([(255, 255, 255)] * (width - img.width))
    return Image(width, sum(i.height for i in images), pixels)


def write_png(image: Image) -> bytes:
    """An RGB PNG; each line with the filter (none, sub or up) that compresses it best."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw, prev, w = bytearray(), bytes(image.width * 3), image.width
    for y in range(image.height):
        line = bytes(v for p in image.pixels[y * w:(y + 1) * w] for v in p)
        sub = bytes((line[x] - (line[x - 3] if x >= 3 else 0)) & 255 for x in range(len(line)))
        up = bytes((a - b) & 255 for a, b in zip(line, prev, strict=True))
        kind, best = min(((0, line), (1, sub), (2, up)), key=lambda c: sum(v if v < 128 else 256 - v for v in c[1]))
        raw += bytes([kind]) + best
        prev = line
    header = struct.pack(">IIBBBBB", image.width, image.height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 9))
            + chunk(b"IEND", b""))
