#!/usr/bin/env python3
"""The spoofed-SYN flood of tests/off_path.rs, run in the lab client's namespace.

argv: IFACE SRC_MAC DST_MAC PREFIX SOURCES VIP PORT RATE SECONDS. Sends IPv6 SYNs to
VIP:PORT from SOURCES addresses PREFIX::1 up (unused addresses of the lab's client subnet,
blackholed at the router), each source in turn with a fresh source port and sequence
number, RATE a second for SECONDS through AF_PACKET on IFACE, then prints "sent N in S s".
It stops by itself.
"""
import socket
import struct
import sys
import time

IFACE = sys.argv[1]
SRC_MAC, DST_MAC = (bytes.fromhex(m.replace(":", "")) for m in sys.argv[2:4])
PREFIX, SOURCES = sys.argv[4], int(sys.argv[5])
VIP, PORT = socket.inet_pton(socket.AF_INET6, sys.argv[6]), int(sys.argv[7])
RATE, SECONDS = int(sys.argv[8]), float(sys.argv[9])
BASE = int.from_bytes(socket.inet_pton(socket.AF_INET6, PREFIX), "big")


def csum(data):
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def syn(i):
    src = (BASE + 1 + i % SOURCES).to_bytes(16, "big")
    # Each source's SYNs in turn take ports 1009 apart: every SYN a new flow.
    sport = 1024 + ((i // SOURCES) * 1009 + (i % SOURCES) * 13) % 64000
    seq = (i * 2654435761) & 0xFFFFFFFF
    # MSS 1460: what a real SYN carries.
    tcp = struct.pack("!HHIIBBHHHBBH", sport, PORT, seq, 0, 6 << 4, 0x02, 64240, 0, 0, 2, 4, 1460)
    pseudo = src + VIP + struct.pack("!IxxxB", len(tcp), 6)
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + src + VIP
    return DST_MAC + SRC_MAC + b"\x86\xdd" + ip + tcp


def main():
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((IFACE, 0))
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic() - start
        if now >= SECONDS:
            break
        due = int(now * RATE) + 1
        while sent < due:
            try:
                sock.send(syn(sent))
            except BlockingIOError:
                pass
            sent += 1
        time.sleep(0.002)
    print("sent %d in %.1f s" % (sent, time.monotonic() - start), flush=True)


main()
