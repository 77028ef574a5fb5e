// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Flood mode.
//
// A spoofed-source flood (SYN, ACK or UDP to a VIP) misses the flow cache frame by frame, and
// at full rate it fills the AF_XDP rx ring, where legitimate first packets are dropped with
// the flood's. Flood mode sheds it here, before the ring. What it polices are the frames that
// may open a flow or belong to none, and that an established flow does not send at its data
// rate: a TCP SYN without ACK to any VIP; and, with the cache on, every frame of a cached mode
// (NAT, FullNAT, DR) the cache missed, since those modes' established flows hit it (a FIN or
// RST of a cached flow included: flood_cached_teardown). Tunnel VIPs are never cached, so
// their non-SYN frames and their UDP are never policed: an established tunnel flow is never
// shed. Every CPU counts the policed frames, and above `threshold` of them a second it
// switches the mode on. While it is on, each source address gets a token bucket (`src_rate`
// frames a second, `src_burst` deep) in an LRU map: a flooding source is cut to its rate and
// the rest is dropped here, counted. A source earns its tokens back with flows that prove
// themselves: the first frame the flow cache forwards for a flow, or its first FIN or RST the
// cache holds an entry for (the engine saw its handshake, or its second datagram, and
// installed it), puts FLOOD_REFUND tokens back in its source's bucket, so many clients behind
// one NAT address open as many flows as they complete, while spoofed sources, which never
// complete one, stay at their rate. The mode switches off after a second below half the
// threshold. The control plane writes `flood_conf` at every commit ([flood] in the config) and
// reads the counters and states.

#ifndef SLUICE_FLOOD_H
#define SLUICE_FLOOD_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "maps.h"
#include "stateless.h"
#include "structs.h"

#define FLOOD_WINDOW_NS 100000000ULL // 100 ms: the detector's window
#define FLOOD_QUIET_WINDOWS 10	     // windows under half the threshold before the mode ends
#define NS_PER_SEC 1000000000ULL
#define FLOOD_MAX_IDLE_NS (10 * NS_PER_SEC) // refill cap: keeps the arithmetic in 64 bits
#define FLOOD_REFUND 4 // tokens a proven flow pays back: about what its handshake, first
		       // data and teardown cost in misses before and after it is cached

// The detector: one more first frame on this CPU; returns whether the mode is on.
static __always_inline int flood_detect(struct flood_cpu *st, const struct flood_conf *c,
					__u64 now)
{
	__u64 elapsed = now - st->window_start;
	if (elapsed >= FLOOD_WINDOW_NS) {
		// The window's rate, per second; a long gap is a quiet stretch of its length.
		__u64 rate = st->window_count * NS_PER_SEC / elapsed;
		__u64 windows = elapsed / FLOOD_WINDOW_NS;
		if (st->on) {
			if (rate * 2 < c->threshold)
				st->quiet += windows > FLOOD_QUIET_WINDOWS ? FLOOD_QUIET_WINDOWS : windows;
			else
				st->quiet = 0;
			if (st->quiet >= FLOOD_QUIET_WINDOWS) {
				st->on = 0;
				st->quiet = 0;
				flood_count(FL_OFF);
			}
		}
		st->window_start = now;
		st->window_count = 0;
	}
	st->window_count += 1;
	st->last_seen = now;
	// On as soon as this window alone holds a second's threshold's share.
	if (!st->on && st->window_count * (NS_PER_SEC / FLOOD_WINDOW_NS) > c->threshold) {
		st->on = 1;
		st->quiet = 0;
		flood_count(FL_ON);
	}
	return st->on;
}

// The source's bucket: returns whether the frame may go on.
static __always_inline int flood_admit(const struct flow *f, const struct flood_conf *c,
				       __u64 now)
{
	struct flood_src k;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, f->src, 16);
	k.family = f->family;
	__u64 cap = c->src_burst * NS_PER_SEC;
	struct flood_bucket *b = bpf_map_lookup_elem(&flood_buckets, &k);
	if (!b) {
		// A new source starts with a full bucket, less this frame.
		struct flood_bucket nb = { .credit = cap - NS_PER_SEC, .last = now };
		if (bpf_map_update_elem(&flood_buckets, &k, &nb, BPF_ANY))
			flood_count(FL_NO_ROOM);
		return 1;
	}
	__u64 idle = now - b->last;
	if (idle > FLOOD_MAX_IDLE_NS)
		idle = FLOOD_MAX_IDLE_NS;
	__u64 credit = b->credit + idle * c->src_rate;
	if (credit > cap)
		credit = cap;
	b->last = now;
	if (credit < NS_PER_SEC) {
		b->credit = credit;
		return 0;
	}
	b->credit = credit - NS_PER_SEC;
	return 1;
}

// A proven flow's first cached frame: its source's bucket, if it has one, gets
// FLOOD_REFUND tokens back (up to its depth). Outside a flood no source has a bucket and
// this is one failed lookup per new cache entry.
static __always_inline void flood_refund(const void *addr, __u8 family)
{
	struct flood_src k;
	__builtin_memset(&k, 0, sizeof(k));
	if (family == FAMILY_V4)
		__builtin_memcpy(k.addr, addr, 4);
	else
		__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	struct flood_bucket *b = bpf_map_lookup_elem(&flood_buckets, &k);
	if (!b)
		return;
	__u32 zero = 0;
	const struct flood_conf *c = bpf_map_lookup_elem(&flood_conf, &zero);
	if (!c)
		return;
	__u64 cap = c->src_burst * NS_PER_SEC;
	__u64 credit = b->credit + FLOOD_REFUND * NS_PER_SEC;
	b->credit = credit > cap ? cap : credit;
	flood_count(FL_REFUNDED);
}

// A FIN or RST of a flow the cache holds: the program hands teardown to the engine without
// looking the cache up (l4_csum), so it would count as a miss. Only a flow the engine saw
// complete its handshake has an entry, so such a frame is not policed, and the entry's first
// sighting pays its source back as a first hit does: a short connection whose handshake ACK
// and first data both reach the engine before the entry is installed (they leave the
// client back to back) still proves itself at its FIN. The lookup costs one map lookup per
// FIN or RST to a cached VIP while the mode is enabled.
static __always_inline int flood_cached_teardown(const struct flow *f)
{
	if (f->proto != IPPROTO_TCP || !(f->tcp_flags & (TCP_FIN | TCP_RST)) ||
	    (f->tcp_flags & TCP_SYN))
		return 0;
	struct cache_val *v;
	if (f->family == FAMILY_V4) {
		struct cache_key4 k;
		__builtin_memset(&k, 0, sizeof(k));
		__builtin_memcpy(&k.src, f->src, 4);
		__builtin_memcpy(&k.dst, f->dst, 4);
		k.sport = f->sport;
		k.dport = f->dport;
		k.proto = f->proto;
		v = bpf_map_lookup_elem(&flow_cache4, &k);
	} else {
		struct cache_key6 k;
		__builtin_memset(&k, 0, sizeof(k));
		__builtin_memcpy(k.src, f->src, 16);
		__builtin_memcpy(k.dst, f->dst, 16);
		k.sport = f->sport;
		k.dport = f->dport;
		k.proto = f->proto;
		v = bpf_map_lookup_elem(&flow_cache6, &k);
	}
	if (!v)
		return 0;
	if (!v->last_seen) {
		flood_refund(f->src, f->family);
		// Activity for the workers' ageing, and the mark that this flow has paid back.
		v->last_seen = bpf_jiffies64();
	}
	return 1;
}

// Whether flood mode polices this VIP frame (see the comment atop this file).
static __always_inline int flood_policed(const struct flow *f, const struct steer_val *vip)
{
	int cached = cache_on && vip->mode != VMODE_TUNNEL;
	if (!f->has_ports)
		return 0;
	if (f->proto == IPPROTO_TCP)
		return (f->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN || cached;
	return f->proto == IPPROTO_UDP && cached;
}

// A VIP frame on its way to the engine: -1 to steer it on, else what flood mode does with
// it (XDP_DROP when its source is over its rate, the stateless answer's action).
static __always_inline int flood_action(struct xdp_md *ctx, const struct flow *f,
					const struct steer_val *vip)
{
	if (!flood_policed(f, vip))
		return -1;
	__u32 zero = 0;
	const struct flood_conf *c = bpf_map_lookup_elem(&flood_conf, &zero);
	struct flood_cpu *st = bpf_map_lookup_elem(&flood_cpus, &zero);
	if (!c || !st || c->threshold == 0)
		return -1;
	if (flood_cached_teardown(f))
		return -1;
	__u64 now = bpf_ktime_get_ns();
	flood_count(FL_FIRST);
	if (!flood_detect(st, c, now))
		return -1;
	int act = stateless_answer(ctx, f, vip);
	if (act >= 0) {
		flood_count(FL_STATELESS);
		return act;
	}
	if (flood_admit(f, c, now)) {
		flood_count(FL_ADMITTED);
		return -1;
	}
	flood_count(FL_SHED);
	return XDP_DROP;
}

#endif
