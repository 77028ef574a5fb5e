#!/usr/bin/env python3
"""The off-path attacker of tests/off_path.rs, run in the lab client's namespace.

argv: IFACE SRC DST SPORT DPORT. Watches IFACE (AF_PACKET) for the client's own segments of
the flow SRC:SPORT -> DST:DPORT, says "ready" on stdout, and at "go" on stdin sends, from
the client's address and port, the packets a blind attacker would: RSTs, an RST+ACK and SYNs
whose sequence numbers are 2^29 to 2^31 away from what the client sends next (an attacker
who cannot see the traffic lands there all but one time in 2^14); then prints "sent N".
The flow's real numbers are read only to be sure every guess misses the window.
"""
import socket
import struct
import sys
import threading

from inet import csum

IFACE, SRC, DST = sys.argv[1], sys.argv[2], sys.argv[3]
SPORT, DPORT = int(sys.argv[4]), int(sys.argv[5])
V6 = ":" in SRC
FAM = socket.AF_INET6 if V6 else socket.AF_INET
SRC_B, DST_B = socket.inet_pton(FAM, SRC), socket.inet_pton(FAM, DST)

seen = {}
lock = threading.Lock()


def sniff(sock):
    while True:
        frame = sock.recv(65535)
        et = struct.unpack("!H", frame[12:14])[0]
        if et == 0x0800 and not V6:
            ihl = (frame[14] & 0x0F) * 4
            if frame[23] != 6 or frame[26:30] != SRC_B or frame[30:34] != DST_B:
                continue
            total = struct.unpack("!H", frame[16:18])[0]
            l4, l4len = 14 + ihl, total - ihl
        elif et == 0x86DD and V6:
            if frame[20] != 6 or frame[22:38] != SRC_B or frame[38:54] != DST_B:
                continue
            l4, l4len = 54, struct.unpack("!H", frame[18:20])[0]
        else:
            continue
        sp, dp, seq, ack = struct.unpack("!HHII", frame[l4 : l4 + 12])
        if (sp, dp) != (SPORT, DPORT):
            continue
        off = (frame[l4 + 12] >> 4) * 4
        flags = frame[l4 + 13]
        nxt = (seq + l4len - off + (1 if flags & 0x03 else 0)) & 0xFFFFFFFF
        with lock:
            seen.update(eth=frame[:14], next=nxt, ack=ack)


def segment(seq, ack, flags):
    tcp = struct.pack("!HHIIBBHHH", SPORT, DPORT, seq & 0xFFFFFFFF, ack, 5 << 4, flags, 512, 0, 0)
    if V6:
        pseudo = SRC_B + DST_B + struct.pack("!IxxxB", len(tcp), 6)
    else:
        pseudo = SRC_B + DST_B + struct.pack("!xBH", 6, len(tcp))
    c = csum(pseudo + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    if V6:
        ip = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + SRC_B + DST_B
    else:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0x4242, 0x4000, 64, 6, 0, SRC_B, DST_B)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + tcp


def main():
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.bind((IFACE, 0))
    threading.Thread(target=sniff, args=(sock,), daemon=True).start()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("no go")
    with lock:
        if "next" not in seen:
            sys.exit("saw no segment of the flow")
        eth, nxt, ack = seen["eth"], seen["next"], seen["ack"]
    RST, SYN, ACK = 0x04, 0x02, 0x10
    sent = []
    for k in range(1, 8):
        sent.append(segment(nxt + k * (1 << 29), 0, RST))
    sent.append(segment(nxt - (1 << 30), 0, RST))
    sent.append(segment(nxt + (1 << 30), ack, RST | ACK))
    sent.append(segment(nxt + (1 << 30), 0, SYN))
    sent.append(segment(nxt + (1 << 31), 0, SYN))
    for p in sent:
        sock.send(eth + p)
    print("sent %d" % len(sent), flush=True)


main()
