// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// `sluice capture` (issue 46): while a capture runs, the frames whose source or destination
// is one of the capture's endpoints are copied, as they arrived and (when the program
// forwards them itself: a flow cache hit, a stateless or outbound answer) as they leave, into
// a ring buffer the control plane reads (datapath/capture). The engine's frames are captured
// by the engine (engine/handler.rs), so a frame steered to a socket is not copied here on its
// way out.
//
// When no capture runs, the cost is one lookup of `capture_conf` (an array map: the verifier
// turns it into a load) and one branch per frame; the parsing and the copies are in
// subprograms only a running capture calls.

#ifndef SLUICE_CAPTURE_H
#define SLUICE_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"

struct capture_conf {
	__u32 on;      // a capture runs
	__u32 snaplen; // bytes kept of each frame, 1..=CAPTURE_SNAP_MAX
};

// An endpoint of the capture: an address, and a port (network order) or 0 for any port.
struct capture_key {
	__u8 addr[16]; // IPv4 in the first 4 bytes, the rest zero
	__be16 port;
	enum ip_family family;
	__u8 pad;
};

// One captured frame, as the ring buffer carries it to the control plane: the head, then
// `caplen` bytes of the frame.
struct capture_head {
	__u64 ts;	// bpf_ktime_get_ns
	__u32 ifindex;	// the interface it arrived on
	__u32 len;	// the frame's length
	__u32 caplen;	// bytes of it in `data`
	enum capture_stage stage;
	__u8 pad[3];
};

struct capture_rec {
	struct capture_head head;
	__u8 data[CAPTURE_SNAP_MAX];
};

// Puts capture_head in the BTF (no map names it), where build.rs finds its layout for the
// Rust side that reads the records (datapath/capture.rs).
const volatile struct capture_head capture_head_layout = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_conf);
} capture_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CAPTURE_ENDPOINTS);
	__type(key, struct capture_key);
	__type(value, __u8);
} capture_match SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CAPTURE_RING_BYTES);
} capture_ring SEC(".maps");

// The running capture's settings, or NULL when none runs.
static __always_inline const struct capture_conf *capture_running(void)
{
	__u32 zero = 0;
	const struct capture_conf *c = bpf_map_lookup_elem(&capture_conf, &zero);
	return c && c->on ? c : NULL;
}

// Whether `addr` (with `port`, or any port) is one of the capture's endpoints.
static __always_inline int capture_endpoint(const __u8 *addr, __be16 port, __u8 family,
					    int has_ports)
{
	struct capture_key k;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	if (bpf_map_lookup_elem(&capture_match, &k))
		return 1;
	if (!has_ports)
		return 0;
	k.port = port;
	return bpf_map_lookup_elem(&capture_match, &k) != NULL;
}

// Copies the frame's first `snaplen` bytes into the ring as `stage`; counts what the ring
// had no room for.
static __noinline int capture_frame(struct xdp_md *ctx, __u32 snaplen, __u32 stage)
{
	__u64 len = bpf_xdp_get_buff_len(ctx);
	__u64 cap = len < snaplen ? len : snaplen;
	if (cap == 0 || cap > CAPTURE_SNAP_MAX)
		return 0;
	struct capture_rec *r = bpf_ringbuf_reserve(&capture_ring, sizeof(*r), 0);
	if (!r) {
		count(CNT_CAPTURE_LOST);
		return 0;
	}
	// The verifier needs the copy's length bounded by the record in a way it can follow:
	// 1..=CAPTURE_SNAP_MAX, which the mask after the decrement gives it (the compiler may not
	// fold it away: the asm hides the value's range from it).
	cap -= 1;
	asm volatile("%[c] &= %[m]" : [c] "+r"(cap) : [m] "i"(CAPTURE_SNAP_MAX - 1));
	cap += 1;
	if (bpf_xdp_load_bytes(ctx, 0, r->data, cap) < 0) {
		bpf_ringbuf_discard(r, 0);
		count(CNT_CAPTURE_LOST);
		return 0;
	}
	r->head.ts = bpf_ktime_get_ns();
	r->head.ifindex = ctx->ingress_ifindex;
	r->head.len = len;
	r->head.caplen = cap;
	r->head.stage = stage;
	bpf_ringbuf_submit(r, 0);
	count(CNT_CAPTURED);
	return 0;
}

// Whether the frame as it arrived is one the capture takes (copied when it is): the
// entry point copies it again on its way out when the program forwards it itself.
static __noinline int capture_in(struct xdp_md *ctx, __u32 snaplen)
{
	struct flow f;
	__builtin_memset(&f, 0, sizeof(f));
	if (parse(ctx, &f) < 0)
		return 0;
	if (!capture_endpoint(f.src, f.sport, f.family, f.has_ports) &&
	    !capture_endpoint(f.dst, f.dport, f.family, f.has_ports))
		return 0;
	capture_frame(ctx, snaplen, CAP_XDP_IN);
	return 1;
}

// The running capture's snap length when it takes this frame (copied as it arrived), else 0.
static __always_inline __u32 capture_taken(struct xdp_md *ctx)
{
	const struct capture_conf *cap = capture_running();
	return cap && capture_in(ctx, cap->snaplen) ? cap->snaplen : 0;
}

// `act` for a frame the program answers or forwards itself, copied on its way out when a
// running capture took it on its way in (`snap`: capture_taken).
static __always_inline int captured_out(struct xdp_md *ctx, int act, __u32 snap)
{
	if (snap && (act == XDP_TX || act == XDP_REDIRECT))
		capture_frame(ctx, snap, CAP_XDP_OUT);
	return act;
}

#endif
