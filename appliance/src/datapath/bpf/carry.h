// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The client's address through FullNAT in the flow cache (cache_val.carry): the sequence
// and acknowledgement numbers lb::process's proxyhdr and toa shift, repeated on the
// segments of an established flow; and the SYN proxy's shift and window rescale
// (lb::process::synproxy `shift_forward`, `shift_reverse`) on a flow it opened.

#ifndef SLUICE_CARRY_H
#define SLUICE_CARRY_H

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "csum.h"
#include "structs.h"

// lb::process::tcpopt::unshift: a backend-side number in the client's space.
static __always_inline __u32 carry_unshift(__u32 x, __u32 base, __u32 delta)
{
	__s32 d = (__s32)(x - base);
	if (d <= 0)
		return x;
	if ((__u32)d < delta)
		return base;
	return x - delta;
}

// The SACK option of the TCP header at `l4` (20 bytes known to be in the frame) in one of
// the two layouts stacks send: "NOP NOP SACK" right after the fixed header, or after "NOP
// NOP TS" (Linux, the BSDs and Windows with timestamps). Returns 0 with its offset and
// length in *sack and *slen (0 for no options or timestamps only), -1 for any other layout:
// those frames go to the engine, whose walk (lb::process::tcpopt) takes every layout. Two
// fixed layouts cost the verifier a handful of states; a general walk over the options
// costs it states exponential in the walk's steps, beyond its budget beside the rest.
static __always_inline int carry_find_sack(__u8 *l4, void *end, __u32 *sack, __u32 *slen)
{
	__u32 doff = (l4[12] >> 4) * 4;
	__u32 off = 20;
	if (doff == 20)
		return 0;
	if ((void *)(l4 + 24) > end)
		return -1;
	if (l4[20] == 1 && l4[21] == 1 && l4[22] == 8 && l4[23] == 10) {
		if (doff == 32)
			return 0;
		off = 32;
	}
	__u8 *p = l4 + off;
	if ((void *)(p + 4) > end)
		return -1;
	if (p[0] != 1 || p[1] != 1 || p[2] != 5)
		return -1;
	__u32 len = p[3];
	// One to four blocks, ending the header (both layouts leave it 4-byte aligned).
	if (len != 10 && len != 18 && len != 26 && len != 34)
		return -1;
	if (off + 2 + len != doff)
		return -1;
	*sack = off + 2;
	*slen = len;
	return 0;
}

// The SYN proxy's window rescale (lb::conntrack::Rescale::apply): the same window in the
// receiver's scale, rounded down, at most 16 bits. Its checksum change is added to `l4_acc`.
static __always_inline void px_window(__u8 *l4, __u8 scale, __u64 *l4_acc)
{
	__u32 from = scale & 0x0f, to = scale >> 4;
	if (from == to)
		return;
	__u16 *wp = (__u16 *)(l4 + 14);
	__u16 o = *wp;
	__u32 w = ((__u32)bpf_ntohs(o) << from) >> to;
	__u16 n = bpf_htons(w > 0xffff ? 0xffff : w);
	*wp = n;
	*l4_acc += not16(o) + n;
}

// The client-address part of an entry (cache_val.carry) on a TCP segment at `l4` (20 bytes
// known to be in the frame), or the SYN proxy's: 0 with the sequence numbers (and the
// proxy's window) rewritten and their checksum change added to `l4_acc`, -1 for a frame the
// engine must see.
static __always_inline int carry_tcp(__u8 *l4, void *end, const struct cache_val *v,
				     __u64 *l4_acc)
{
	// l4_csum checked this, but through another register the verifier may not connect.
	if ((void *)(l4 + 20) > end)
		return -1;
	__u32 *seqp = (__u32 *)(l4 + 4);
	__u32 *ackp = (__u32 *)(l4 + 8);
	__u32 base = v->carry_base;
	int ack = l4[13] & 0x10;
	int px = v->carry & CARRY_PX;
	// Every check before any store: a declined frame goes to the engine untouched. The
	// proxy's shift never comes with a client-address kind (flowcache/mod.rs `cacheable`).
	if (px && (v->carry & ~CARRY_PX))
		return -1;
	if ((v->carry & CARRY_TOA) && ack && bpf_ntohl(*ackp) == base)
		return -1;
	if ((v->carry & CARRY_SEQ) && bpf_ntohl(*seqp) == base)
		return -1;
	__u32 sack = 0, slen = 0;
	int px_ack = (v->carry & CARRY_PX_ACK) && ack;
	if (((v->carry & CARRY_ACK) || px_ack) && carry_find_sack(l4, end, &sack, &slen))
		return -1;
	if (v->carry & (CARRY_SEQ | CARRY_PX_SEQ)) {
		__u32 o = *seqp;
		__u32 by = px ? v->px_shift : v->carry_delta;
		__u32 n = bpf_htonl(bpf_ntohl(o) + by);
		*seqp = n;
		*l4_acc += not32(o) + n;
	}
	if (((v->carry & CARRY_ACK) && ack) || px_ack) {
		__u32 o = *ackp;
		__u32 h = bpf_ntohl(o);
		__u32 n = bpf_htonl(px ? h + v->px_shift : carry_unshift(h, base, v->carry_delta));
		*ackp = n;
		*l4_acc += not32(o) + n;
	}
	if (px)
		px_window(l4, v->px_scale, l4_acc);
	if (sack) {
		// Edges at sack + 2, + 6, ...: carry_find_sack checked the option lies inside the
		// header, which lies inside the frame; the bounds below are for the verifier.
#pragma unroll
		for (int i = 0; i < 8; i++) {
			__u32 e = sack + 2 + i * 4;
			if (e + 4 > sack + slen || e > 56)
				break;
			__u32 *w = (__u32 *)(l4 + e);
			if ((void *)(w + 1) > end)
				break;
			__u32 o = *w;
			__u32 h = bpf_ntohl(o);
			__u32 n = bpf_htonl(px ? h + v->px_shift
					       : carry_unshift(h, base, v->carry_delta));
			*w = n;
			*l4_acc += not32(o) + n;
		}
	}
	return 0;
}

#endif
