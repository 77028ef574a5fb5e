// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// A frame's headers into struct flow, and the steering keys' lookup: what the entry point
// decides on.

#ifndef SLUICE_PARSE_H
#define SLUICE_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "maps.h"
#include "structs.h"

// The key's value, or NULL when nothing matches.
static __always_inline const struct steer_val *lookup(const __u8 *addr, __be16 port, __u8 proto,
						      __u8 kind, __u8 family, int has_ports)
{
	struct steer_key k;
	const struct steer_val *v;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	if (has_ports) {
		k.kind = kind;
		k.proto = proto;
		k.port = port;
		v = bpf_map_lookup_elem(&steer_keys, &k);
		if (v)
			return v;
		k.port = 0;
		return bpf_map_lookup_elem(&steer_keys, &k);
	}
	k.kind = kind | KIND_ADDR;
	return bpf_map_lookup_elem(&steer_keys, &k);
}

// `l4` is the L4 header, `off` bytes into the frame (counted alongside the pointer: the
// verifier only lets privileged programs subtract packet pointers).
static __always_inline int parse_ports(void *l4, void *end, struct flow *f, __u32 off)
{
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP) {
		__be16 *ports = l4;
		if ((void *)(ports + 2) > end)
			return -1;
		f->sport = ports[0];
		f->dport = ports[1];
		f->has_ports = 1;
		f->l4off = (__u16)off;
		if (f->proto == IPPROTO_TCP && (void *)((__u8 *)l4 + 14) <= end)
			f->tcp_flags = ((__u8 *)l4)[13];
	}
	return 0;
}

// The IPv4 header at `ip`, `off` bytes into the frame: as `parse`.
static __always_inline int parse_ip4(struct iphdr *ip, void *end, struct flow *f, __u32 off)
{
	if ((void *)(ip + 1) > end)
		return -1;
	if (ip->ihl < 5)
		return -1;
	f->family = FAMILY_V4;
	f->proto = ip->protocol;
	__builtin_memcpy(f->src, &ip->saddr, 4);
	__builtin_memcpy(f->dst, &ip->daddr, 4);
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		f->frag = 1;
	if (ip->frag_off & bpf_htons(IP_OFFSET)) {
		// A later fragment carries no ports: steer on the address alone so the
		// engine sees every piece of a datagram whose first piece it owns.
		return 1;
	}
	return parse_ports((void *)ip + ip->ihl * 4, end, f, off + ip->ihl * 4);
}

// The IPv6 header at `ip6`, `off` bytes into the frame: as `parse`.
static __always_inline int parse_ip6(struct ipv6hdr *ip6, void *end, struct flow *f, __u32 off)
{
	void *cur;
	__u8 next;
	if ((void *)(ip6 + 1) > end)
		return -1;
	f->family = FAMILY_V6;
	__builtin_memcpy(f->src, &ip6->saddr, 16);
	__builtin_memcpy(f->dst, &ip6->daddr, 16);
	next = ip6->nexthdr;
	cur = ip6 + 1;
	off += sizeof(*ip6);
	// Walk the extension headers as the engine does (wire::ipv6::walk_ext_headers): as many
	// as it walks, and a deeper chain is refused here as it is there, so no frame is less
	// policed for being hard to parse.
#pragma unroll
	for (int i = 0; i < MAX_EXT_HEADERS; i++) {
		if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING ||
		    next == IPPROTO_DSTOPTS) {
			__u8 *opt = cur;
			if ((void *)(opt + 2) > end)
				return -1;
			next = opt[0];
			cur = opt + (opt[1] + 1) * 8;
			off += (opt[1] + 1) * 8;
		} else if (next == IPPROTO_FRAGMENT) {
			__u8 *fh = cur;
			if ((void *)(fh + 8) > end)
				return -1;
			next = fh[0];
			cur = fh + 8;
			off += 8;
			f->frag = 1;
			// Offset is the top 13 bits of bytes 2..3.
			if ((((__u16)fh[2] << 8) | fh[3]) & 0xfff8) {
				f->proto = next;
				return 1;
			}
		}
	}
	if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS ||
	    next == IPPROTO_FRAGMENT)
		return 2;
	f->proto = next;
	if (next == IPPROTO_ICMPV6) {
		__u8 *icmp = cur;
		if ((void *)(icmp + 1) > end)
			return -1;
		// Router and neighbour discovery belong to the kernel whatever the address.
		if (icmp[0] >= 133 && icmp[0] <= 137)
			f->never = 1;
		return 0;
	}
	return parse_ports(cur, end, f, off);
}

// The frame's addresses, protocol and ports into `f` (zeroed by the caller), through up to
// two VLAN tags: 0, 1 for a later fragment (no ports: steered on the address alone), 2 for
// an IPv6 frame with more extension headers than MAX_EXT_HEADERS (its addresses only), -1
// for a frame that is not IP or is cut short.
static __always_inline int parse(struct xdp_md *ctx, struct flow *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur;
	__u32 off;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return -1;
	proto = eth->h_proto;
	cur = eth + 1;
	off = sizeof(*eth);

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
			struct vlan_hdr *vh = cur;
			if ((void *)(vh + 1) > end)
				return -1;
			proto = vh->proto;
			cur = vh + 1;
			off += sizeof(*vh);
		}
	}

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ip4(cur, end, f, off);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ip6(cur, end, f, off);
	return -1;
}

#endif
