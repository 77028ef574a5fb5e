"""What the off-path senders (spray.py, blind.py) share: the Internet checksum."""
import struct


def csum(data):
    """RFC 1071's ones'-complement sum of `data` (padded to an even length), complemented."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF
