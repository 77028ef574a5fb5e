// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Sluice XDP steering program.
//
// Runs on every datapath interface and decides, per frame, whether the load balancer owns
// it: traffic to a VIP (a tenant VIP's in VXLAN), NAT return traffic from a backend, or
// FullNAT return traffic to one of our SNAT addresses goes to the AF_XDP socket of the
// receive queue; everything else (ARP, ND, BGP, SSH, health-probe replies to our own
// addresses) goes to the kernel stack. In front of the steering sits the flow cache, which
// forwards the established flows the engine decided itself; beside it, while a flood lasts,
// flood mode sheds spoofed first packets and answers DR VIPs statelessly.
//
// This file is the entry point; the rest is in headers, one concern each (as katran's
// lib/bpf): consts.h (every constant, and how each reaches the Rust side), structs.h, maps.h
// (every map and the counter bumps), parse.h (headers and the steering keys), tenant.h
// (VXLAN tenant VIPs), csum.h, tx.h (how a frame leaves), flowcache.h with front.h (each
// CPU's copies of the entries it hit) and carry.h (the client's address through FullNAT),
// stateless.h (a DR VIP's answer from its Maglev ring), flood.h, acl.h (a VIP's allow
// and deny lists) and capture.h (`sluice capture`).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"
#include "tenant.h"
#include "flowcache.h"
#include "stateless.h"
#include "flood.h"
#include "acl.h"
#include "capture.h"

// Whether the running appliance holds the engine's frames (see maps.h `hold`).
static __always_inline int held(void)
{
	__u32 zero = 0;
	__u32 *h = bpf_map_lookup_elem(&hold, &zero);
	return h && *h;
}

// A frame for the engine that no socket takes: dropped while held, else the kernel's.
static __always_inline int no_socket(int hold_on)
{
	count(CNT_NO_SOCKET);
	if (hold_on) {
		count(CNT_HELD);
		return XDP_DROP;
	}
	count(CNT_PASSED);
	return XDP_PASS;
}

// A frame deeper than either parser walks: dropped when it is to a VIP, as the engine
// would drop it, else the kernel's.
static __always_inline int too_deep(const struct flow *f)
{
	if (lookup(f->dst, 0, 0, KIND_VIP, f->family, 0)) {
		count(CNT_DEEP);
		return XDP_DROP;
	}
	count(CNT_PASSED);
	return XDP_PASS;
}

SEC("xdp")
int sluice_steer(struct xdp_md *ctx)
{
	struct flow f;
	int r;
	int owned = 0;
	__u32 snap = capture_taken(ctx); // capture.h

	if (cache_on) {
		int act = cache_forward(ctx);
		if (act >= 0 && act <= XDP_REDIRECT)
			return captured_out(ctx, act, snap);
	}

	__builtin_memset(&f, 0, sizeof(f));
	r = parse(ctx, &f);
	if (r < 0 || f.never)
		goto pass;
	if (r == 2)
		return too_deep(&f);

	// A tenant VIP's VXLAN frame: to the engine as it is, without flood mode (its policing
	// and stateless answer see the outer headers) and never a flow cache miss (the cache
	// holds no tenant flows). Any other VXLAN frame goes on as an ordinary frame.
	int tenant = tenant_vip(ctx, &f) != NULL;
	const struct steer_val *vip = NULL;
	if (tenant)
		owned = 1;
	else if ((vip = lookup(f.dst, f.dport, f.proto, KIND_VIP, f.family, f.has_ports))) {
		// Who may reach the VIP, before flood mode's buckets or answer (acl.h).
		if (acl_denied(&f, vip))
			return XDP_DROP;
		int act = flood_action(ctx, &f, vip);
		if (act >= 0)
			return captured_out(ctx, act, snap);
		owned = 1;
	} else if (lookup(f.dst, f.dport, f.proto, KIND_LOCAL, f.family, f.has_ports))
		owned = 1;
	else if ((vip = lookup(f.dst, f.dport, f.proto, KIND_OUTBOUND, f.family, f.has_ports))) {
		int act = outbound_answer(ctx, vip);
		if (act >= 0) {
			count(CNT_OUTBOUND);
			return captured_out(ctx, act, snap);
		}
		owned = 1;
	}
	else if (!lookup(f.dst, 0, 0, KIND_HOST, f.family, 0) &&
		 lookup(f.src, f.sport, f.proto, KIND_BACKEND, f.family, f.has_ports))
		// A backend's reply to a client (NAT mode); its replies to our own address are
		// health probes and stay with the kernel.
		owned = 1;
	if (!owned)
		goto pass;

	int hold_on = held();
	__u32 ifindex = ctx->ingress_ifindex;
	__u32 *slot = bpf_map_lookup_elem(&if_slots, &ifindex);
	if (!slot || ctx->rx_queue_index >= MAX_QUEUES)
		return no_socket(hold_on);
	__u32 q = *slot * MAX_QUEUES + ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &q))
		return no_socket(hold_on);
	if (r == 1)
		count(CNT_FRAGMENTS);
	if (tenant)
		count(CNT_TENANT);
	count(CNT_STEERED);
	if (cache_on && !tenant)
		cache_count(CC_MISS);
	// A socket closed between the lookup and the redirect: the same as none.
	return bpf_redirect_map(&xsks, q, hold_on ? XDP_DROP : XDP_PASS);
pass:
	count(CNT_PASSED);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
