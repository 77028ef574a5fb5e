// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The flow cache (flowcache.rs installs and evicts its entries): an established flow the
// AF_XDP engine has already decided is rewritten and sent here, in the kernel, byte for byte
// as lb::process would have done it. Anything the cache does not cover (misses, TCP
// SYN/FIN/RST, fragments, IP options, VLAN tags, extension headers, TTL <= 1, bad lengths or
// header checksums) falls through to the steering.

#ifndef SLUICE_FLOWCACHE_H
#define SLUICE_FLOWCACHE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "carry.h"
#include "consts.h"
#include "csum.h"
#include "front.h"
#include "maps.h"
#include "structs.h"
#include "tx.h"

// The L4 header of a cacheable frame with `avail` bytes after the IP header: its checksum
// field, or NULL for what the cache leaves to the engine (not TCP/UDP, bad lengths, and TCP
// SYN/FIN/RST: handshake and teardown move the engine's connection state).
static __always_inline __be16 *l4_csum(__u8 *l4, void *end, __u8 proto, __u32 avail)
{
	if (proto == IPPROTO_TCP) {
		if (avail < 20 || (void *)(l4 + 20) > end)
			return NULL;
		__u32 doff = (l4[12] >> 4) * 4;
		if (doff < 20 || doff > avail)
			return NULL;
		if (l4[13] & (TCP_SYN | TCP_FIN | TCP_RST))
			return NULL;
		return (__be16 *)(l4 + 16);
	}
	if (proto == IPPROTO_UDP) {
		if (avail < 8 || (void *)(l4 + 8) > end)
			return NULL;
		__u32 ulen = ((__u32)l4[4] << 8) | l4[5];
		if (ulen < 8 || ulen > avail)
			return NULL;
		return (__be16 *)(l4 + 6);
	}
	return NULL;
}

// A TCP segment with FIN or RST, which the engine judges (cache_fold first).
static __always_inline int tcp_teardown(__u8 *l4, void *end, __u8 proto)
{
	return proto == IPPROTO_TCP && (void *)(l4 + 20) <= end &&
	       (l4[13] & (TCP_FIN | TCP_RST)) && !(l4[13] & TCP_SYN);
}

// A field moved on to `to` when that lies after it by at most TRACK_MAX_ADVANCE.
static __always_inline void track_to(__u32 *field, __u32 to)
{
	__u32 d = to - *field;
	if ((__s32)d > 0 && d <= TRACK_MAX_ADVANCE)
		*field = to;
}

// A forwarded TCP segment moves its direction's sequence fields on (lb::conntrack::track,
// whose rules these repeat): the end of its payload, and its acknowledgement. The copy `v`
// is this CPU's front copy or the map's entry; a FIN or RST, which the engine judges, folds
// the front copy back into the entry first (cache_fold).
static __always_inline void cache_track(struct cache_val *v, __u8 *l4, void *end, __u32 avail)
{
	if (!(v->track & (TRACK_SEQ | TRACK_ACK)) || (void *)(l4 + 20) > end)
		return;
	__u32 doff = (l4[12] >> 4) * 4;
	if (v->track & TRACK_SEQ)
		track_to(&v->seq_next, bpf_ntohl(*(__be32 *)(l4 + 4)) + (avail - doff));
	if ((v->track & TRACK_ACK) && (l4[13] & TCP_ACK))
		track_to(&v->ack_max, bpf_ntohl(*(__be32 *)(l4 + 8)));
}

// After the rewrite: MACs, activity, counters, and out.
static __always_inline int cache_send(struct xdp_md *ctx, struct ethhdr *eth,
				      struct cache_val *v, __u64 len)
{
	// dst_mac and src_mac are the frame's first 12 bytes in order, 4-aligned in the
	// entry: three word copies, not twelve byte copies (the verifier lets a frame be
	// written unaligned where the CPU does that cheaply, as x86 does).
	const __u32 *mac = (const __u32 *)v->dst_mac;
	__u32 *hdr = (__u32 *)eth;
	hdr[0] = mac[0];
	hdr[1] = mac[1];
	hdr[2] = mac[2];
	// Hits are the sum of the slots' packets: one per-CPU counter per hit, not two.
	count_stat(v->stat, len);
	return send_to(ctx, v->ifindex, v->tx, v->tx_port);
}

// IPv4: returns an XDP action when the cache forwards the frame, -1 to fall through.
static __always_inline int cache_forward4(struct xdp_md *ctx, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end)
		return -1;
	// Version 4 without options (IHL 5): one byte, 0x45.
	if (*(__u8 *)ip != 0x45)
		return -1;
	if (ip->frag_off & bpf_htons(0x3fff))
		return -1;
	__u32 tot = bpf_ntohs(ip->tot_len);
	// Older verifiers (6.12) lose a value's bounds through the byte swap, then refuse the
	// pointer arithmetic below; the mask (kept by the barrier) gives them back.
	barrier_var(tot);
	tot &= 0xffff;
	if (tot < 20 || (void *)ip + tot > end)
		return -1;
	// The engine drops a bad header checksum; leave that to it. One's-complement sums do
	// not care about byte order, so the words are summed as loaded.
	__u32 *w = (void *)ip;
	if (fold64((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) != 0xffff)
		return -1;
	__u8 proto = ip->protocol;
	__u8 *l4 = (void *)(ip + 1);
	__be16 *ports = (__be16 *)l4;
	if ((void *)(ports + 2) > end)
		return -1;
	// struct cache_key4 as words: src, dst; sport, dport, proto.
	__u64 k[2] = {
		word2(ip->saddr, ip->daddr),
		word2((__u32)ports[0] | ((__u32)ports[1] << 16), proto),
	};
	__be16 *csum = l4_csum(l4, end, proto, tot - 20);
	if (!csum) {
		if (tcp_teardown(l4, end, proto))
			cache_fold4(k);
		return -1;
	}
	// jiffies is a plain load (the verifier inlines the helper; bpf_ktime_get_coarse_ns is a
	// call, 2 ns a hit).
	struct cache_val *v = cache_find4(k, bpf_jiffies64());
	if (!v)
		return -1;
	if (proto == IPPROTO_TCP)
		cache_track(v, l4, end, tot - 20);

	if (v->action == ACT_NAT) {
		if (ip->ttl <= 1)
			return -1;
		// Sums as loaded (see patch_l4). TTL is the first byte of its 16-bit word with the
		// protocol: one less TTL is that word minus htons(0x100).
		__u64 l4_acc = 0;
		if (v->carry && (proto != IPPROTO_TCP || carry_tcp(l4, end, v, &l4_acc)))
			return -1;
		__u16 *tw = (__u16 *)&ip->ttl;
		__u16 old = *tw;
		__u16 nw = old - bpf_htons(0x100);
		__u64 ip_acc = not16(old) + nw;
		*tw = nw;
		if (v->flags & SET_SRC)
			set_addr4(&ip->saddr, v->new_src, &ports[0], v->new_sport, &ip_acc, &l4_acc);
		if (v->flags & SET_DST)
			set_addr4(&ip->daddr, v->new_dst, &ports[1], v->new_dport, &ip_acc, &l4_acc);
		ip->check = (__u16)~fold64(not16(ip->check) + ip_acc);
		patch_l4(csum, l4_acc, proto == IPPROTO_UDP, proto == IPPROTO_UDP);
	} else if (v->action != ACT_DR) {
		return -1;
	}
	return cache_send(ctx, eth, v, (__u64)(end - data));
}

// IPv6 (no extension headers): as cache_forward4.
static __always_inline int cache_forward6(struct xdp_md *ctx, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(ip6 + 1) > end)
		return -1;
	if (ip6->version != 6)
		return -1;
	__u32 avail = bpf_ntohs(ip6->payload_len);
	barrier_var(avail); // as tot in cache_forward4
	avail &= 0xffff;
	if ((void *)(ip6 + 1) + avail > end)
		return -1;
	__u8 proto = ip6->nexthdr;
	__u8 *l4 = (void *)(ip6 + 1);
	__be16 *ports = (__be16 *)l4;
	if ((void *)(ports + 2) > end)
		return -1;
	// struct cache_key6 as words: src, dst (two each); sport, dport, proto.
	const __u32 *sa = (const __u32 *)&ip6->saddr;
	const __u32 *da = (const __u32 *)&ip6->daddr;
	__u64 k[5] = {
		word2(sa[0], sa[1]),
		word2(sa[2], sa[3]),
		word2(da[0], da[1]),
		word2(da[2], da[3]),
		word2((__u32)ports[0] | ((__u32)ports[1] << 16), proto),
	};
	__be16 *csum = l4_csum(l4, end, proto, avail);
	if (!csum) {
		if (tcp_teardown(l4, end, proto))
			cache_fold6(k);
		return -1;
	}
	struct cache_val *v = cache_find6(k, bpf_jiffies64());
	if (!v)
		return -1;
	if (proto == IPPROTO_TCP)
		cache_track(v, l4, end, avail);

	if (v->action == ACT_NAT) {
		if (ip6->hop_limit <= 1)
			return -1;
		__u64 l4_acc = 0;
		if (v->carry && (proto != IPPROTO_TCP || carry_tcp(l4, end, v, &l4_acc)))
			return -1;
		ip6->hop_limit -= 1;
		if (v->flags & SET_SRC)
			set_addr6((__u32 *)&ip6->saddr, v->new_src, &ports[0], v->new_sport, &l4_acc);
		if (v->flags & SET_DST)
			set_addr6((__u32 *)&ip6->daddr, v->new_dst, &ports[1], v->new_dport, &l4_acc);
		patch_l4(csum, l4_acc, proto == IPPROTO_UDP, 0);
	} else if (v->action != ACT_DR) {
		return -1;
	}
	return cache_send(ctx, eth, v, (__u64)(end - data));
}

// The cache's answer for a frame: an XDP action when it forwards the frame, -1 to fall
// through to the steering.
static __always_inline int cache_forward(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int act = -1;
	if ((void *)(eth + 1) <= end) {
		if (eth->h_proto == bpf_htons(ETH_P_IP))
			act = cache_forward4(ctx, data, end);
		else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
			act = cache_forward6(ctx, data, end);
	}
	return act;
}

#endif
