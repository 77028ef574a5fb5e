// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// The flow cache's front table.
//
// A hit in flow_cache4/6 costs the kernel's jhash of the key and a walk of its bucket: about
// 25 ns a frame at 256 flows, a quarter of the XDP_REDIRECT ceiling's whole frame (`sluice
// bench --flows`, run CL against run C). So each CPU keeps a direct-mapped copy of the entries
// it hit, at a slot of our own hash (a multiply per 8 bytes of key): a hit there is one
// inlined array read and a key compare. A copy serves only the jiffy it was made in, so every
// flow still finds its entry in the LRU map once a jiffy on each CPU it arrives on: the
// entry's last_seen (the workers' ageing), the flood refund of its first hit and the LRU's
// order stay what they were. And the control plane makes every copy of a key stale the moment
// it installs or evicts that key (flowcache/mod.rs `FlowCache::install`, `evict`): it writes a
// new number into front_gen at the key's slot, through an mmap, without a syscall, and a copy
// is good only while that number is the one read before its lookup. A slot holds the first
// flow that arrives in a jiffy; another flow of the same slot takes the map's path until the
// next jiffy (a frame costs one array read more than before then, and nothing is written).
//
// The slot's hash (FRONT_BITS, FRONT_M0..4 in consts.h) is flowcache/layout.rs
// `front_index`'s, whose multipliers build.rs reads from consts.h.

#ifndef SLUICE_FRONT_H
#define SLUICE_FRONT_H

#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "flood.h"
#include "maps.h"
#include "structs.h"

// An entry found in the LRU map: stamped with the jiffy (activity for the workers' ageing,
// flowcache/worker.rs `WorkerCache::tick`; a busy flow dirties its entry once a jiffy, not
// every frame), its first hit paying its source's flood bucket back.
static __always_inline void cache_stamp(struct cache_val *v, const void *src, __u8 family,
					__u64 now)
{
	if (!v->last_seen)
		flood_refund(src, family);
	if (v->last_seen != now)
		v->last_seen = now;
}

// The front slot of an IPv4 key's words.
static __always_inline __u32 front_slot4(const __u64 w[2])
{
	return (__u32)((w[0] * FRONT_M0 + w[1] * FRONT_M1) >> (64 - FRONT_BITS));
}

// The front slot of an IPv6 key's words (in cache_front6; front_gen's slot is FRONT_SLOTS
// more).
static __always_inline __u32 front_slot6(const __u64 w[5])
{
	return (__u32)((w[0] * FRONT_M0 + w[1] * FRONT_M1 + w[2] * FRONT_M2 + w[3] * FRONT_M3 +
			w[4] * FRONT_M4) >>
		       (64 - FRONT_BITS));
}

// The entry of the IPv4 key whose words are `w`: this CPU's front copy, else the LRU map's
// (then copied to the front when the slot is free this jiffy or holds the same key); NULL
// for a miss.
static __always_inline struct cache_val *cache_find4(const __u64 w[2], __u64 now)
{
	__u32 slot = front_slot4(w);
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front4 *fe = bpf_map_lookup_elem(&cache_front4, &slot);
	if (!gen || !fe)
		return NULL;
	__u64 g = *(volatile __u64 *)gen;
	int same = fe->key[0] == w[0] && fe->key[1] == w[1];
	if (same && fe->seen == now && fe->gen == g)
		return &fe->val;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache4, w);
	if (!v)
		return NULL;
	cache_stamp(v, w, FAMILY_V4, now);
	if (same || fe->seen != now) {
		fe->key[0] = w[0];
		fe->key[1] = w[1];
		fe->seen = now;
		fe->gen = g;
		__builtin_memcpy(&fe->val, v, sizeof(fe->val));
	}
	return v;
}

// The same for an IPv6 key.
static __always_inline struct cache_val *cache_find6(const __u64 w[5], __u64 now)
{
	__u32 fslot = front_slot6(w);
	__u32 slot = fslot + FRONT_SLOTS;
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front6 *fe = bpf_map_lookup_elem(&cache_front6, &fslot);
	if (!gen || !fe)
		return NULL;
	__u64 g = *(volatile __u64 *)gen;
	int same = fe->key[0] == w[0] && fe->key[1] == w[1] && fe->key[2] == w[2] &&
		   fe->key[3] == w[3] && fe->key[4] == w[4];
	if (same && fe->seen == now && fe->gen == g)
		return &fe->val;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache6, w);
	if (!v)
		return NULL;
	cache_stamp(v, w, FAMILY_V6, now);
	if (same || fe->seen != now) {
#pragma unroll
		for (int i = 0; i < 5; i++)
			fe->key[i] = w[i];
		fe->seen = now;
		fe->gen = g;
		__builtin_memcpy(&fe->val, v, sizeof(fe->val));
	}
	return v;
}

// `to` into a tracked field when it lies after it (a front copy's field, itself moved on a
// segment at a time, into the map's entry).
static __always_inline void track_max(__u32 *field, __u32 to)
{
	if ((__s32)(to - *field) > 0)
		*field = to;
}

// The sequence fields of this CPU's live front copy `fv` folded into the entry `v`.
static __always_inline void fold_into(struct cache_val *v, const struct cache_val *fv)
{
	if (fv->track & TRACK_SEQ)
		track_max(&v->seq_next, fv->seq_next);
	if (fv->track & TRACK_ACK)
		track_max(&v->ack_max, fv->ack_max);
}

// A FIN or RST of a cached TCP flow goes to the engine, which judges it against where the
// flow's sequence spaces stand: this CPU's front copy of the IPv4 key `w`, moved on since
// it was made, is folded into the map's entry first, so the engine reads the latest.
static __always_inline void cache_fold4(const __u64 w[2])
{
	__u32 slot = front_slot4(w);
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front4 *fe = bpf_map_lookup_elem(&cache_front4, &slot);
	if (!gen || !fe || fe->key[0] != w[0] || fe->key[1] != w[1] ||
	    fe->gen != *(volatile __u64 *)gen)
		return;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache4, w);
	if (v)
		fold_into(v, &fe->val);
}

// The same for an IPv6 key.
static __always_inline void cache_fold6(const __u64 w[5])
{
	__u32 fslot = front_slot6(w);
	__u32 slot = fslot + FRONT_SLOTS;
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front6 *fe = bpf_map_lookup_elem(&cache_front6, &fslot);
	if (!gen || !fe || fe->gen != *(volatile __u64 *)gen)
		return;
	if (fe->key[0] != w[0] || fe->key[1] != w[1] || fe->key[2] != w[2] ||
	    fe->key[3] != w[3] || fe->key[4] != w[4])
		return;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache6, w);
	if (v)
		fold_into(v, &fe->val);
}

// Two 32-bit words as one key word (the first at the lower address).
static __always_inline __u64 word2(__u32 lo, __u32 hi)
{
	return (__u64)lo | ((__u64)hi << 32);
}

#endif
