// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The steering program's constants, and how each reaches the Rust side without a hand copy:
//
// - A code the Rust side writes into a map or reads from one is an enum that types the
//   struct field it lives in (`enum NAME : __u8` gives a one-byte field a type of its own:
//   C23, which clang also takes in C17), or for a counter map's slots, a field of maps.h's
//   `counter_slots`. The object's BTF then carries the enum and build.rs generates it into
//   datapath/abi.rs (`abi::steer_kind::KIND_VIP`, ...).
// - A size is the size of the map it bounds; build.rs reads every map's size from the object
//   (abi.rs `maps`), so the Rust side has MAX_INTERFACES as `maps::IF_SLOTS.entries`.
// - The few values BTF cannot carry (64-bit multipliers; lb's seeds and port, which the C
//   repeats) are the #define lines of the last section: build.rs reads them from this file
//   (abi.rs `defines`) and the Rust build checks lb's against them.

#ifndef SLUICE_CONSTS_H
#define SLUICE_CONSTS_H

#include <linux/types.h>

// ---- codes the Rust side shares (in the BTF) ---------------------------------------------

// steer_key.kind.
enum steer_kind : __u8 {
	KIND_VIP = 0,	   // match the destination: a virtual service
	KIND_BACKEND = 1,  // match the source: NAT return traffic from a backend
	KIND_LOCAL = 2,	   // match the destination: FullNAT return traffic to a SNAT address
	KIND_HOST = 3,	   // match the destination: the appliance's own address, never steered
	KIND_OUTBOUND = 4, // match the destination: an answer to a port of a VIP's outbound range
	KIND_TENANT = 5,   // match a VXLAN frame's VNI and inner destination: a tenant VIP
	KIND_ADDR = 0x80,  // address-only variant (port 0, proto 0) for frames without ports
};

// steer_key.family, flood_src.family.
enum ip_family : __u8 {
	FAMILY_V4 = 4,
	FAMILY_V6 = 6,
};

// steer_val.mode: what a VIP is to flood mode. Other keys (return traffic, our own
// addresses) carry VMODE_NONE.
enum vip_mode : __u8 {
	VMODE_NONE = 0,
	VMODE_NAT = 1,
	VMODE_FULLNAT = 2,
	VMODE_DR = 3,
	VMODE_TUNNEL = 4, // never in the flow cache: its established flows miss it frame by frame
};

// steer_val.ring: a DR VIP's slot in stateless_vips (or, in a KIND_OUTBOUND key, the port
// owner's backend slot), or NO_RING for none.
enum vip_ring : __u16 {
	NO_RING = 0xffff,
};

// The slots of `counters` (maps.h `counter_slots` puts them in the BTF).
enum steer_counter : __u32 {
	CNT_STEERED = 0,
	CNT_PASSED = 1,
	CNT_NO_SOCKET = 2,
	CNT_FRAGMENTS = 3,
	CNT_OUTBOUND = 4, // outbound answers the program forwarded to their port's owner itself
	CNT_TENANT = 5,	  // of the steered frames, VXLAN frames for a tenant VIP
	CNT_DEEP = 6,	  // IPv6 frames to a VIP with more extension headers than MAX_EXT_HEADERS
			  // (the engine drops them too, as too_many_headers): dropped here
	CNT_HELD = 7,	  // frames for the engine while no socket takes them and `hold` is set
			  // (a hand-over between two processes, or a crashed one): dropped, never
			  // the kernel's, which would reset their connections
	CNT_DENIED = 8,	  // frames to a VIP whose allow and deny lists deny their source (acl.h)
	CNT_CAPTURED = 9, // frames a running capture copied into its ring (capture.h)
	CNT_CAPTURE_LOST = 10, // frames a running capture lost: its ring had no room
	CNT_MAX = 11,
};

// capture_rec.stage: where a running capture copied a frame (capture.h).
enum capture_stage : __u8 {
	CAP_XDP_IN = 0,	 // as it arrived
	CAP_XDP_OUT = 1, // as the program forwarded it itself
};

// acl_val.verdict (acl.h).
enum acl_verdict : __u8 {
	ACL_ALLOW = 0,
	ACL_DENY = 1,
};

// The slots of `cache_counters` (as `counters`): misses (owned frames that went to the engine), hits dropped
// because their egress interface is not in tx_ports. Hits are counted per (VIP, backend) in
// cache_stats, so slot 0 is unused.
enum cache_counter : __u32 {
	CC_UNUSED = 0,
	CC_MISS = 1,
	CC_NO_EGRESS = 2,
	CC_MAX = 3,
};

// The slots of `flood_counters` (as `counters`).
enum flood_counter : __u32 {
	FL_FIRST = 0,	  // VIP frames that may open a flow (the detector's input)
	FL_ADMITTED = 1,  // of those, passed on while the mode was on (inside their bucket)
	FL_SHED = 2,	  // dropped while the mode was on (source over its bucket)
	FL_ON = 3,	  // switches on
	FL_OFF = 4,	  // switches off
	FL_NO_ROOM = 5,	  // sources without a bucket (the LRU insert failed): let through
	FL_REFUNDED = 6,  // proven flows that paid their source's bucket back
	FL_STATELESS = 7, // answered here from the VIP's ring while the mode was on
	FL_MAX = 8,
};

// cache_val.action.
enum cache_action : __u8 {
	ACT_NONE = 0, // nothing the program knows: the frame goes on to the engine
	ACT_NAT = 1,  // TTL - 1, then the addresses and ports `flags` name (NAT, FullNAT, both ways)
	ACT_DR = 2,   // MACs only
};

// cache_val.flags: which of ACT_NAT's rewrites apply.
enum cache_set : __u8 {
	SET_NONE = 0,
	SET_SRC = 1, // new_src and new_sport
	SET_DST = 2, // new_dst and new_dport
};

// cache_val.track: which of a TCP entry's sequence fields the engine gave it
// (lb::conntrack::track): the program moves them on as it forwards the flow.
enum cache_track : __u8 {
	TRACK_NONE = 0,
	TRACK_SEQ = 1, // seq_next: the end of the furthest segment of this direction
	TRACK_ACK = 2, // ack_max: the highest acknowledgement this direction sent
};

// IPv6 extension headers walked before the upper layer (wire::ipv6::MAX_EXT_HEADERS: the
// engine walks as many, so the two parsers agree on what a frame is).
#define MAX_EXT_HEADERS 8

// A running capture (capture.h): the bytes a record keeps of a frame at most (a power of
// two), the endpoints it may match, the ring's size (a power of two of pages).
#define CAPTURE_SNAP_MAX 2048
#define CAPTURE_ENDPOINTS 1024
#define CAPTURE_RING_BYTES (8 << 20)

// How far one segment may move a tracked field on (lb::conntrack::track::MAX_ADVANCE): a
// spoofed segment past it moves nothing.
#define TRACK_MAX_ADVANCE 0x100000

// cache_val.carry (lb::process proxyhdr and toa; a FullNAT TCP VIP with client_address).
enum cache_carry : __u8 {
	CARRY_NONE = 0,
	CARRY_SEQ = 1, // client -> backend: seq + delta; the first data segment (seq == base)
		       // goes to the engine, which puts the PROXY header in again
	CARRY_ACK = 2, // backend -> client: ack and SACK edges beyond base less delta
	CARRY_TOA = 4, // client -> backend: segments acknowledging exactly base go to the
		       // engine, which adds the TOA option
	// A flow the SYN proxy opened (lb::process::synproxy), never with the kinds above
	// (flowcache/mod.rs `cacheable`): px_shift is what the field gains, px_scale the window
	// field's rescale (low nibble: the sender's scale, high: the receiver's).
	CARRY_PX_ACK = 8,  // client -> backend: the acknowledgement and SACK edges of a segment
			   // with ACK + px_shift (the backend's space)
	CARRY_PX_SEQ = 16, // backend -> client: seq + px_shift (the cookie's space)
};
#define CARRY_PX (CARRY_PX_ACK | CARRY_PX_SEQ)

// cache_val.tx, stateless_hop.tx: how a frame that leaves through the interface it came in
// on is sent.
enum hairpin_tx : __u8 {
	TX_XDP_TX = 0,	 // XDP_TX (real NICs)
	TX_REDIRECT = 1, // a DEVMAP redirect: veth kicks its peer's NAPI after an XDP_TX only
			 // when the peer runs an XDP program, not when NAPI is on for GRO, so
			 // XDP_TX'd frames would wait there for the next frame the kernel sends
};

// stateless_vip.hash: the VIP's hash fields (lb/hash.rs HashFields).
enum hash_fields : __u8 {
	HASH_5 = 0,
	HASH_3 = 1,
	HASH_2 = 2,
};

// ---- sizes (the Rust side reads them as the maps' sizes: abi.rs `maps`) -------------------

enum steer_limits {
	// The XSKMAP slot of a frame's socket is interface slot * MAX_QUEUES + queue.
	MAX_QUEUES = 64,
	MAX_INTERFACES = 16,
	STAT_SLOTS = 4096, // cache_stats: per (VIP, backend) counters, slot 0 "other"
	STATELESS_VIPS = 32,
	RING_STRIDE = 65537, // entries each DR VIP's ring may have in stateless_rings
	STATELESS_RING_ENTRIES = STATELESS_VIPS * RING_STRIDE, // 8 MiB of u32 backend slots
	BACKEND_SLOTS = 4096,
	FRONT_BITS = 11, // the flow cache's front table: FRONT_SLOTS copies per family per CPU
	FRONT_SLOTS = 1 << FRONT_BITS,
	ACL_RULES = 65536,   // each family's trie (config MAX_ACL_RULES)
	ACL_COUNTERS = 4096, // acl_drops: one slot per (VIP, list)
};

// ---- protocol constants -----------------------------------------------------------------

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

#define VXLAN_FLAG_I 0x08 // the VNI is valid
#define VXLAN_HLEN 8
#define UDP_HLEN 8

// ---- values BTF cannot carry (build.rs reads these lines: one literal each) ---------------

// The front table's slot of a key: its 8-byte words times these, summed, top FRONT_BITS
// bits (flowcache/layout.rs `front_index` computes the same slot).
#define FRONT_M0 0x9e3779b97f4a7c15ULL
#define FRONT_M1 0xc2b2ae3d27d4eb4fULL
#define FRONT_M2 0x165667b19e3779f9ULL
#define FRONT_M3 0xd6e8feb86659fd93ULL
#define FRONT_M4 0xff51afd7ed558ccdULL

#define FLOW_SEED 0x51751ce0u	  // lb::hash::FLOW_SEED (abi.rs checks)
#define JHASH_INITVAL 0xdeadbeefu // lb::hash::JHASH_INITVAL (abi.rs checks)
#define VXLAN_PORT 4789		  // lb::process::TENANT_VXLAN_PORT (abi.rs checks)

#endif
