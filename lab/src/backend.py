#!/usr/bin/env python3
"""A lab backend: a real HTTP server and a UDP echo server that say who they are.

GET /whoami  -> the backend's name
GET /blob    -> BLOB_SIZE deterministic bytes (byte i is (i * 7 + i // 251) % 256)
GET /blob4   -> the blob four times (4 MB)
POST /upload -> "<length> <crc32>" of the request body (zlib.crc32)
UDP datagram -> "<name>:<datagram>"

argv: NAME PORTS [VIPS]. VIPS (comma separated) are addresses this backend holds on lo for
DR and tunnel modes: a UDP reply must come from the address the request was sent to, so a
socket is bound to each of them (an unbound socket would answer from eth0's address).
"""
import socket
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = sys.argv[1]
PORTS = [int(p) for p in sys.argv[2].split(",")]
VIPS = [a for a in sys.argv[3].split(",") if a] if len(sys.argv) > 3 else []
BLOB_SIZE = 1 << 20
BLOB = bytes((i * 7 + i // 251) % 256 for i in range(BLOB_SIZE))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/whoami":
            body = NAME.encode()
        elif self.path == "/blob":
            body = BLOB
        elif self.path == "/blob4":
            body = BLOB * 4
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("X-Backend", NAME)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if self.path != "/upload":
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length)
        body = f"{len(data)} {zlib.crc32(data)}".encode()
        self.send_response(200)
        self.send_header("X-Backend", NAME)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self):
        # One dual-stack socket serves IPv4 and IPv6.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        super().server_bind()


def udp_echo(port, address="::"):
    family = socket.AF_INET if "." in address else socket.AF_INET6
    s = socket.socket(family, socket.SOCK_DGRAM)
    # Lets the wildcard socket and the per-VIP sockets share the port; the kernel delivers
    # to the most specific one.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if address == "::":
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((address, port))
    lost = 0
    while True:
        # Whole datagrams, however large (the fragment tests send 9 KB).
        data, peer = s.recvfrom(65535)
        try:
            s.sendto(NAME.encode() + b":" + data, peer)
        except OSError as e:
            # A real server outlives a reply it cannot send (a flood the load balancer
            # forwards here fills the transmit queue: ENOBUFS, EAGAIN); the datagram is lost,
            # as UDP allows, and the socket keeps serving.
            lost += 1
            if lost & (lost - 1) == 0:  # the 1st, 2nd, 4th, 8th... not one line a datagram
                print(f"backend {NAME}: {lost} udp replies lost on {address} port {port}: {e}",
                      flush=True)


for port in PORTS:
    threading.Thread(target=udp_echo, args=(port,), daemon=True).start()
    for vip in VIPS:
        threading.Thread(target=udp_echo, args=(port, vip), daemon=True).start()
    server = Server6(("::", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print(f"backend {NAME} listening on {PORTS}", flush=True)
threading.Event().wait()
