#!/usr/bin/env python3
"""The spoofed floods of tests/off_path.rs and tests/flood_modes.rs, run in the lab client's
namespace.

argv: IFACE SRC_MAC DST_MAC PREFIX SOURCES KIND PORT RATE SECONDS VIP [VIP ...]. Sends to
each VIP in turn (port PORT) from SOURCES addresses PREFIX+1 up (unused addresses of the lab's
client subnet, blackholed at the router; IPv6 or IPv4, as the VIPs are), each source in turn
with a fresh source port, RATE frames a second for SECONDS through AF_PACKET on IFACE, then
prints "sent N in S s". KIND is `syn` (a SYN with a fresh sequence number and MSS 1460, as a
real SYN carries) or `udp2` (every flow two datagrams, one after the other: what makes a flow
more than embryonic where only the client's side is seen). It stops by itself.
"""
import socket
import struct
import sys
import time

from inet import csum

IFACE = sys.argv[1]
SRC_MAC, DST_MAC = (bytes.fromhex(m.replace(":", "")) for m in sys.argv[2:4])
PREFIX, SOURCES, KIND = sys.argv[4], int(sys.argv[5]), sys.argv[6]
PORT, RATE, SECONDS = int(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
V6 = ":" in PREFIX
FAMILY = socket.AF_INET6 if V6 else socket.AF_INET
VIPS = [socket.inet_pton(FAMILY, v) for v in sys.argv[10:]]
BASE = int.from_bytes(socket.inet_pton(FAMILY, PREFIX), "big")
WIDTH = 16 if V6 else 4
assert KIND in ("syn", "udp2"), KIND
assert VIPS, "no VIP"


def ip_header(src, dst, proto, length):
    if V6:
        return struct.pack("!IHBB", 6 << 28, length, proto, 64) + src + dst
    head = struct.pack("!BBHHHBBH", 0x45, 0, 20 + length, 0, 0x4000, 64, proto, 0) + src + dst
    return head[:10] + struct.pack("!H", csum(head)) + head[12:]


def pseudo(src, dst, proto, length):
    if V6:
        return src + dst + struct.pack("!IxxxB", length, proto)
    return src + dst + struct.pack("!xBH", proto, length)


def frame(flow, copy):
    """The `copy`th frame of spoofed flow number `flow`."""
    src = (BASE + 1 + flow % SOURCES).to_bytes(WIDTH, "big")
    dst = VIPS[flow % len(VIPS)]
    # Each source's flows in turn take ports 1009 apart: every flow a new 5-tuple.
    sport = 1024 + ((flow // SOURCES) * 1009 + (flow % SOURCES) * 13) % 64000
    if KIND == "syn":
        seq = (flow * 2654435761) & 0xFFFFFFFF
        l4 = struct.pack("!HHIIBBHHHBBH", sport, PORT, seq, 0, 6 << 4, 0x02, 64240, 0, 0, 2, 4, 1460)
        proto, at = 6, 16
    else:
        payload = b"spray %d/%d" % (flow, copy)
        l4 = struct.pack("!HHHH", sport, PORT, 8 + len(payload), 0) + payload
        proto, at = 17, 6
    check = csum(pseudo(src, dst, proto, len(l4)) + l4) or 0xFFFF
    l4 = l4[:at] + struct.pack("!H", check) + l4[at + 2:]
    ether = b"\x86\xdd" if V6 else b"\x08\x00"
    return DST_MAC + SRC_MAC + ether + ip_header(src, dst, proto, len(l4)) + l4


def main():
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((IFACE, 0))
    copies = 2 if KIND == "udp2" else 1
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic() - start
        if now >= SECONDS:
            break
        due = int(now * RATE) + 1
        while sent < due:
            try:
                sock.send(frame(sent // copies, sent % copies))
            except BlockingIOError:
                pass
            sent += 1
        time.sleep(0.002)
    print("sent %d in %.1f s" % (sent, time.monotonic() - start), flush=True)


main()
