"""A bar chart as a PNG with no plotting library (``distsdfg plan --plot``).

Uses matplotlib when it is installed; otherwise draws the bars and their labels with a
3x5 pixel font and writes the PNG with zlib.
"""
from __future__ import annotations

import struct
import zlib
from typing import List, Sequence

__all__ = ["bar_chart_png"]

_FONT = {  # 3x5 glyphs, rows top to bottom, bits left to right
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111", "J": "001001001101010",
    "K": "101101110101101", "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111", "V": "101101101101010",
    "W": "101101111111101", "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    "_": "000000000000111", ".": "000000000000010", ",": "000000000010100", "-": "000000111000000",
    "(": "010100100100010", ")": "010001001001010", " ": "000000000000000", ":": "000010000010000",
}


def _text(img, x: int, y: int, s: str, color, scale: int = 2):
    for ch in s.upper():
        g = _FONT.get(ch, _FONT["-"])
        for r in range(5):
            for c in range(3):
                if g[r * 3 + c] == "1":
                    for dy in range(scale):
                        for dx in range(scale):
                            _put(img, x + c * scale + dx, y + r * scale + dy, color)
        x += 4 * scale


def _put(img, x, y, color):
    if 0 <= y < len(img) and 0 <= x < len(img[0]) // 3:
        img[y][3 * x:3 * x + 3] = bytes(color)


def _png(img, path: str):
    h, w = len(img), len(img[0]) // 3
    raw = b"".join(b"\x00" + bytes(row) for row in img)

    def chunk(tag, data):
        c = tag + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def bar_chart_png(labels: Sequence[str], values: Sequence[float], path: str, title: str = "") -> None:
    """Horizontal bars, one per label, with its value printed; written to ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 0.4 * len(labels) + 1))
        ax.barh(list(labels)[::-1], list(values)[::-1])
        ax.set_xlabel("bytes")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return
    except ImportError:
        pass
    labels = [str(l)[:40] for l in labels]
    row, left, width = 24, 8 + 4 * 2 * max([len(l) for l in labels] + [1]) + 8, 360
    h = 40 + row * len(labels) + 10
    w = left + width + 140
    img: List[bytearray] = [bytearray(b"\xff" * (3 * w)) for _ in range(h)]
    _text(img, 8, 10, title, (0, 0, 0))
    top = max(list(values) + [1])
    for i, (lab, val) in enumerate(zip(labels, values)):
        y = 40 + i * row
        _text(img, 8, y + 4, lab, (0, 0, 0))
        n = int(width * val / top) if top else 0
        for yy in range(y, y + row - 6):
            for xx in range(left, left + max(n, 1)):
                _put(img, xx, yy, (31, 119, 180))
        _text(img, left + n + 6, y + 4, f"{int(val):,}", (60, 60, 60))
    _png(img, path)
