"""Decodes the PNG screenshots Chromium takes (8-bit RGB or RGBA, not interlaced) with zlib only."""
import struct
import zlib


class Image:
    def __init__(self, width, height, channels, rows):
        self.width, self.height, self.channels, self.rows = width, height, channels, rows

    def pixel(self, x, y):
        row, i = self.rows[y], x * self.channels
        return row[i], row[i + 1], row[i + 2]

    def count_color(self, rgb, tolerance=6):
        """Pixels within `tolerance` of `rgb` on every channel."""
        r0, g0, b0 = rgb
        count = 0
        c = self.channels
        for row in self.rows:
            for i in range(0, len(row), c):
                if abs(row[i] - r0) <= tolerance and abs(row[i + 1] - g0) <= tolerance \
                        and abs(row[i + 2] - b0) <= tolerance:
                    count += 1
        return count


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color_type, _, _, interlace = header
    if depth != 8 or color_type not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d, color type %d, interlace %d"
                         % (depth, color_type, interlace))
    channels = 3 if color_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(b"".join(idat))
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            for i in range(stride):
                line[i] = (line[i] + previous[i]) & 0xFF
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                upper_left = previous[i - channels] if i >= channels else 0
                line[i] = (line[i] + _paeth(left, previous[i], upper_left)) & 0xFF
        elif kind != 0:
            raise ValueError("bad PNG filter type %d in row %d" % (kind, y))
        rows.append(line)
        previous = line
    return Image(width, height, channels, rows)


def size(data):
    """(width, height) from the IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", data[16:24])


def encode_indexed(image, max_colors=256):
    """An 8-bit palette PNG of `image` for documentation, several times smaller than the RGB
    screenshot. The palette takes colors by frequency but skips near-duplicates of colors it
    already holds (antialiasing shades), so that a small marker's distinct color keeps a slot;
    every other color becomes its nearest palette entry."""
    counts = {}
    c = image.channels
    for row in image.rows:
        data = bytes(row)
        for i in range(0, len(data), c):
            key = data[i:i + 3]
            counts[key] = counts.get(key, 0) + 1
    def distance(a, b):
        return (a[0] - b[0]) ** 2 * 3 + (a[1] - b[1]) ** 2 * 4 + (a[2] - b[2]) ** 2 * 2

    by_count = sorted(counts, key=counts.get, reverse=True)
    palette = []
    for threshold in (100, 0):  # a second pass fills any slots left with the skipped shades
        for color in by_count:
            if len(palette) == max_colors:
                break
            if color not in palette and all(distance(color, p) > threshold for p in palette):
                palette.append(color)
    index = {color: i for i, color in enumerate(palette)}

    def nearest(color):
        return min(range(len(palette)), key=lambda i: distance(palette[i], color))

    for color in counts:
        if color not in index:
            index[color] = nearest(color)
    raw = bytearray()
    for row in image.rows:
        data = bytes(row)
        raw.append(0)
        raw += bytes(index[data[i:i + 3]] for i in range(0, len(data), c))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", image.width, image.height, 8, 3, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"PLTE", b"".join(palette)) +
            chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))
