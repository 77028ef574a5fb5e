// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The stateless answer.
//
// While flood mode is on, a DR VIP's policed frames (first packets, and misses of no cached
// flow) are answered here from the VIP's Maglev ring instead of being policed: the engine's
// stateless answer (lb::process::flow `stateless`), byte for byte. The flow hash is
// lb/hash.rs's (jhash2 over the VIP's hash fields with FLOW_SEED, the key's words loaded as
// they sit in memory), the ring slot is hash % M, and the frame leaves with the backend's
// next-hop MACs, nothing else changed. No state is made anywhere: once the flood ends, the
// flow's later frames reach the engine, which has no entry for them and gives the same
// answer (and a flow that was cached keeps hitting the cache, which is looked up first).
// The control plane fills the maps with every table version (steer.rs `set_stateless`).
// Needs the flow cache's egress map, so only with the cache on.

#ifndef SLUICE_STATELESS_H
#define SLUICE_STATELESS_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "maps.h"
#include "structs.h"
#include "tx.h"

static __always_inline __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

// include/linux/jhash.h's __jhash_mix and __jhash_final.
#define JHASH_MIX(a, b, c)                                                                 \
	do {                                                                               \
		a -= c; a ^= rol32(c, 4); c += b;                                          \
		b -= a; b ^= rol32(a, 6); a += c;                                          \
		c -= b; c ^= rol32(b, 8); b += a;                                          \
		a -= c; a ^= rol32(c, 16); c += b;                                         \
		b -= a; b ^= rol32(a, 19); a += c;                                         \
		c -= b; c ^= rol32(b, 4); b += a;                                          \
	} while (0)

#define JHASH_FINAL(a, b, c)                                                               \
	do {                                                                               \
		c ^= b; c -= rol32(b, 14);                                                 \
		a ^= c; a -= rol32(c, 11);                                                 \
		b ^= a; b -= rol32(a, 25);                                                 \
		c ^= b; c -= rol32(b, 16);                                                 \
		a ^= c; a -= rol32(c, 4);                                                  \
		b ^= a; b -= rol32(a, 14);                                                 \
		c ^= b; c -= rol32(b, 24);                                                 \
	} while (0)

// lb::hash::FlowKey::hash: jhash2 over 4 words (IPv4) or 10 (IPv6), FLOW_SEED.
static __always_inline __u32 flow_hash(const struct flow *f, __u8 fields)
{
	__u32 w[10];
	__builtin_memcpy(w, f->src, 16);
	__builtin_memcpy(&w[4], f->dst, 16);
	// sport then dport in network order, loaded as one little-endian word.
	__u32 ports = fields == HASH_5 ? (__u32)f->sport | ((__u32)f->dport << 16) : 0;
	__u32 proto = fields == HASH_2 ? 0 : f->proto;
	__u32 a, b, c;
	if (f->family == FAMILY_V4) {
		a = b = c = JHASH_INITVAL + (4 << 2) + FLOW_SEED;
		a += w[0];
		b += w[4];
		c += ports;
		JHASH_MIX(a, b, c);
		a += proto;
		JHASH_FINAL(a, b, c);
		return c;
	}
	a = b = c = JHASH_INITVAL + (10 << 2) + FLOW_SEED;
	a += w[0];
	b += w[1];
	c += w[2];
	JHASH_MIX(a, b, c);
	a += w[3];
	b += w[4];
	c += w[5];
	JHASH_MIX(a, b, c);
	a += w[6];
	b += w[7];
	c += ports;
	JHASH_MIX(a, b, c);
	a += proto;
	JHASH_FINAL(a, b, c);
	return c;
}

// An untagged IPv4 frame without options or IPv6 frame without extension headers, not a
// fragment: what the stateless answer takes (the rest goes on to the policing and the
// engine). `parse` has read the headers already; this repeats the checks on the bytes.
static __always_inline int plain(struct ethhdr *eth, void *end)
{
	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return 0;
		return *(__u8 *)ip == 0x45 && !(ip->frag_off & bpf_htons(IP_MF | IP_OFFSET));
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		return ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP;
	}
	return 0;
}

// The frame to backend slot `backend` with its next hop's MACs and nothing else (the DR
// rewrite): an XDP action, or -1 when no next hop is known.
static __always_inline int dr_to_backend(struct xdp_md *ctx, struct ethhdr *eth, __u32 backend)
{
	const struct stateless_hop *hop = bpf_map_lookup_elem(&stateless_hops, &backend);
	if (!hop || !hop->ok)
		return -1;
	__builtin_memcpy(eth->h_dest, hop->dst_mac, 6);
	__builtin_memcpy(eth->h_source, hop->src_mac, 6);
	return send_to(ctx, hop->ifindex, hop->tx, hop->tx_port);
}

// The stateless answer for a DR VIP's frame: an XDP action, or -1 when there is none here
// (another mode, no ring, no next hop, a VLAN tag, options, extension headers or a
// fragment) and the frame goes on to the policing and the engine.
static __always_inline int stateless_answer(struct xdp_md *ctx, const struct flow *f,
					    const struct steer_val *vip)
{
	if (!cache_on || vip->mode != VMODE_DR || vip->ring == NO_RING)
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (!plain(eth, end))
		return -1;
	__u32 r = vip->ring;
	const struct stateless_vip *sv = bpf_map_lookup_elem(&stateless_vips, &r);
	if (!sv || sv->m == 0 || sv->vip != vip->vip)
		return -1;
	__u32 idx = sv->base + flow_hash(f, sv->hash) % sv->m;
	const __u32 *backend = bpf_map_lookup_elem(&stateless_rings, &idx);
	if (!backend)
		return -1;
	return dr_to_backend(ctx, eth, *backend);
}

// An answer to a DR VIP's outbound port (issue 23): to the backend that owns the port, its
// MACs and nothing else, as the engine's lb/process/outbound.rs does; -1 sends the frame to
// the engine (a tunnel VIP, no owner or next hop known, the cache off, a VLAN tag, options,
// extension headers or a fragment). No state: the key says who owns the port.
static __always_inline int outbound_answer(struct xdp_md *ctx, const struct steer_val *o)
{
	if (!cache_on || o->mode != VMODE_DR || o->ring == NO_RING)
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (!plain(eth, end))
		return -1;
	return dr_to_backend(ctx, eth, o->ring);
}

#endif
