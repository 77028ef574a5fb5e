// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Checksum arithmetic for the flow cache's rewrites: lb::process's incremental updates, on
// the words as they sit in the frame.

#ifndef SLUICE_CSUM_H
#define SLUICE_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

// lb::process's fold64: a one's-complement sum folded to 16 bits, the same value without
// branches. Every sum here is a few dozen terms of at most 32 bits, far below 2^47, and for
// those three 16-bit steps are enough: after the first the sum is under 2^31 + 2^16, after
// the second at most 0x18000, and the third adds the last carry back in. A positive sum's
// fold is the one value in 1..=0xffff congruent to it modulo 0xffff, so it is the value
// lb::process computes with its 32-bit steps first (the golden fixtures check the bytes).
static __always_inline __u16 fold64(__u64 x)
{
	x = (x & 0xffff) + (x >> 16);
	x = (x & 0xffff) + (x >> 16);
	x = (x & 0xffff) + (x >> 16);
	return (__u16)x;
}

static __always_inline __u64 not16(__u16 v)
{
	return (__u64)(__u16)~v;
}

static __always_inline __u64 not32(__u32 v)
{
	return (__u64)(__u32)~v;
}

// The L4 checksum patch of L4Csum::patch_delta: an absent IPv4 UDP checksum stays absent,
// and a UDP checksum computed as zero becomes 0xffff in both families.
//
// The arithmetic runs on the words as they sit in the frame, without byte swaps: a one's-
// complement sum of byte-swapped words is the byte-swapped sum (RFC 1071, 2.(B)), so the
// bytes written are the ones lb::process writes from host-order arithmetic (the golden
// fixtures check it).
static __always_inline void patch_l4(__be16 *csum, __u64 delta, int udp, int udp4)
{
	__u16 old = *csum;
	// UDP over IPv4 may carry no checksum (0): it stays none.
	if (udp4 && old == 0)
		return;
	__u16 c = ~fold64(not16(old) + delta);
	// A UDP checksum that comes to zero goes out as 0xffff in either family (RFC 768; over
	// IPv6 a zero field means none, which RFC 8200 8.1 has receivers discard).
	if (udp && c == 0)
		c = 0xffff;
	*csum = c;
}

// Writes `new_port` over `port`; returns the checksum delta (as loaded, like patch_l4).
static __always_inline __u64 swap_port(__be16 *port, __be16 new_port)
{
	__u16 old = *port;
	*port = new_port;
	return not16(old) + (__u16)new_port;
}

// Writes a new IPv4 address and port over a frame's; adds the changes to the IP header's
// and the L4 checksum's sums (as loaded, see patch_l4).
static __always_inline void set_addr4(__be32 *addr, const __u8 *new_addr, __be16 *port,
				      __be16 new_port, __u64 *ip_acc, __u64 *l4_acc)
{
	__u32 o = *addr;
	// new_src and new_dst are 4-aligned in struct cache_val (asserted there): one load.
	__u32 n = *(const __u32 *)new_addr;
	*addr = n;
	__u64 d = not32(o) + n;
	*ip_acc += d;
	*l4_acc += d + swap_port(port, new_port);
}

// The same for an IPv6 address (no header checksum).
static __always_inline void set_addr6(__u32 *addr, const __u8 *new_addr, __be16 *port,
				      __be16 new_port, __u64 *l4_acc)
{
	const __u32 *n = (const __u32 *)new_addr;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		*l4_acc += not32(addr[i]) + n[i];
		addr[i] = n[i];
	}
	*l4_acc += swap_port(port, new_port);
}

#endif
