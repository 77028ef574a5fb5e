// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The program's structs: the maps' keys and values, which the Rust side reads from the
// object's BTF (datapath/abi.rs), and the frame as the program parsed it. Map keys have no
// implicit padding, so the kernel hashes no uninitialised bytes.

#ifndef SLUICE_STRUCTS_H
#define SLUICE_STRUCTS_H

#include <linux/types.h>

#include "consts.h"

// ---- steering --------------------------------------------------------------------------

struct steer_key {
	__u8 addr[16];		// IPv4 in the first 4 bytes, the rest zero
	__be16 port;		// network order; 0 = any port
	__u8 proto;		// IANA protocol number; 0 in address-only keys
	enum steer_kind kind;
	enum ip_family family;
	__u8 vni[3];		// KIND_TENANT: the 24-bit VNI, network order; zero in other kinds
};

struct steer_val {
	__u32 vip;		// the VIP's slot in the engine's tables
	enum vip_ring ring;	// its slot in stateless_vips (DR VIPs), or NO_RING; KIND_OUTBOUND
				// keys: the port owner's backend slot (mode VMODE_DR), or NO_RING
	enum vip_mode mode;
	__u8 pad;
	__u16 acl; // the id of the VIP's allow and deny lists in acl.h's tries; 0: none
};

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

// A frame as `parse` read it.
struct flow {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 has_ports;
	__u8 never; // ND and other link-local control: always the kernel's
	__u8 tcp_flags; // TCP only, when the frame holds byte 13 of the header
	__u8 frag;	// a fragment, the first one included
	__u16 l4off;	// where the L4 header starts in the frame, when has_ports
};

// ---- flow cache ------------------------------------------------------------------------

// IPv4 and IPv6 flows live in maps of their own: the kernel hashes the whole key on every
// lookup (jhash, 12 bytes a round), so a 16-byte IPv4 key costs less than half a 40-byte
// one.
struct cache_key4 {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct cache_key6 {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct cache_val {
	__u64 last_seen; // jiffies of the last hit; the workers only look for change
	__u8 new_src[16];
	__u8 new_dst[16];
	__be16 new_sport;
	__be16 new_dport;
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 ifindex; // egress
	__u32 stat;    // slot in cache_stats
	enum cache_action action;
	enum cache_set flags;
	enum hairpin_tx tx;
	__u8 tx_port;  // the egress's slot in tx_ports
	__u32 carry_base;  // host order: where the client-address rewrite starts (CARRY_*)
	enum cache_carry carry;
	__u8 carry_delta;  // bytes the backend's view of the client's stream runs ahead
	enum cache_track track;
	__u8 px_scale; // CARRY_PX_*: the window's rescale, sender's scale | receiver's << 4
	// TCP, as the frames of this direction arrive (before any rewrite), host order: moved on
	// by every frame forwarded here, read by the engine when a FIN or RST reaches it.
	__u32 seq_next; // TRACK_SEQ: the end of the furthest segment
	__u32 ack_max;	// TRACK_ACK: the highest acknowledgement
	__u32 px_shift; // CARRY_PX_*: what the sequence field gains (host order, mod 2^32)
};
_Static_assert(__builtin_offsetof(struct cache_val, src_mac) ==
		       __builtin_offsetof(struct cache_val, dst_mac) + 6 &&
	       __builtin_offsetof(struct cache_val, dst_mac) % 4 == 0,
	       "cache_send copies both MACs as three aligned words");
_Static_assert(__builtin_offsetof(struct cache_val, new_src) % 4 == 0 &&
		       __builtin_offsetof(struct cache_val, new_dst) % 4 == 0,
	       "set_addr4 loads a new address as one aligned word");

struct cache_stat {
	__u64 packets;
	__u64 bytes;
};

// The front table's copies (front.h). The map keys (struct cache_key4, cache_key6) as 8-byte
// words, little-endian: a word's low half holds the lower bytes. The frame's fields are put
// together in registers: a hit reads no key back from the stack that was just written there
// in pieces.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "front keys assume little-endian");
_Static_assert(sizeof(struct cache_key4) == 2 * 8, "cache_key4 is two words");
_Static_assert(sizeof(struct cache_key6) == 5 * 8, "cache_key6 is five words");

struct front4 {
	__u64 key[2]; // struct cache_key4
	__u64 seen; // jiffies when copied: the copy serves that jiffy only
	__u64 gen;  // front_gen at the slot before the copy's lookup
	struct cache_val val;
};

struct front6 {
	__u64 key[5]; // struct cache_key6
	__u64 seen;
	__u64 gen;
	struct cache_val val;
};

// ---- flood mode ------------------------------------------------------------------------

struct flood_conf {
	__u64 threshold; // first frames a second (per CPU) that switch the mode on; 0: never
	__u64 src_rate;	 // frames a second one source may send while the mode is on
	__u64 src_burst; // the bucket's depth, in frames
};

struct flood_cpu {
	__u64 window_start; // ns (bpf_ktime_get_ns)
	__u64 window_count; // first frames in the window
	__u64 last_seen;    // ns of the last first frame (the control plane's "still flooding")
	__u32 on;
	__u32 quiet; // consecutive quiet windows while on
};

struct flood_src {
	__u8 addr[16]; // IPv4 in the first 4 bytes, the rest zero
	enum ip_family family;
	__u8 pad[3];
};

struct flood_bucket {
	__u64 credit; // tokens * NS_PER_SEC, at most src_burst * NS_PER_SEC
	__u64 last;   // ns of the last refill
};

// ---- stateless answer --------------------------------------------------------------------

struct stateless_vip {
	__u32 vip;  // the VIP's slot in the engine's tables (a reload moves ring slots)
	__u32 base; // the VIP's first entry in stateless_rings
	__u32 m;    // its ring size; 0: no ring (no backend takes new flows)
	enum hash_fields hash;
	__u8 pad[3];
};

// A backend's next hop (lb::NextHop) as the DR rewrite uses it.
struct stateless_hop {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 ifindex; // egress
	__u8 ok;       // 0: no next hop known (the engine asks for it)
	enum hairpin_tx tx; // for a hop out of the interface the frame came in on
	__u8 tx_port;  // the egress's slot in tx_ports
	__u8 pad;
};

#endif
