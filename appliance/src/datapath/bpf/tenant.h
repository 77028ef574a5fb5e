// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Tenant VIPs (issue 23).
//
// A tenant VIP lives in a tenant's virtual network: its frames arrive in VXLAN (RFC 7348),
// UDP to VXLAN_PORT at one of the appliance's own addresses, and are matched on the VNI and
// the inner destination address, port and protocol (KIND_TENANT keys, no address-only twin).
// What is looked into here is exactly what lb/process/tenant.rs takes: the VXLAN I flag set,
// an untagged inner Ethernet frame, inner IPv4 that is not a fragment or inner IPv6 whose
// next header is TCP or UDP itself. Everything else (another VNI, port or protocol, a VLAN
// tag, a fragment, a truncated frame) goes on to the ordinary steering, which leaves it to
// the kernel: a tenant's addresses mean nothing in the underlay.

#ifndef SLUICE_TENANT_H
#define SLUICE_TENANT_H

#include "consts.h"
#include "maps.h"
#include "parse.h"
#include "structs.h"

#define TENANT_MAX_L4OFF 1024 // outer headers deeper than this are not looked into

// The tenant VIP an outer UDP frame `f` (parsed by `parse`) carries in VXLAN, or NULL.
static __always_inline const struct steer_val *tenant_vip(struct xdp_md *ctx,
							   const struct flow *f)
{
	if (f->proto != IPPROTO_UDP || !f->has_ports || f->dport != bpf_htons(VXLAN_PORT) ||
	    f->frag)
		return NULL;
	if (!lookup(f->dst, 0, 0, KIND_HOST, f->family, 0))
		return NULL;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 off = f->l4off;
	if (off > TENANT_MAX_L4OFF)
		return NULL;
	__u8 *vx = (__u8 *)data + off + UDP_HLEN;
	struct ethhdr *eth = (void *)(vx + VXLAN_HLEN);
	if ((void *)(eth + 1) > end)
		return NULL;
	if (!(vx[0] & VXLAN_FLAG_I))
		return NULL;

	struct steer_key k;
	__builtin_memset(&k, 0, sizeof(k));
	k.kind = KIND_TENANT;
	k.vni[0] = vx[4];
	k.vni[1] = vx[5];
	k.vni[2] = vx[6];
	__u8 *l4;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return NULL;
		if (ip->ihl < 5 || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
			return NULL;
		k.family = FAMILY_V4;
		k.proto = ip->protocol;
		__builtin_memcpy(k.addr, &ip->daddr, 4);
		l4 = (__u8 *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return NULL;
		k.family = FAMILY_V6;
		k.proto = ip6->nexthdr;
		__builtin_memcpy(k.addr, &ip6->daddr, 16);
		l4 = (__u8 *)(ip6 + 1);
	} else {
		return NULL;
	}
	if (k.proto != IPPROTO_TCP && k.proto != IPPROTO_UDP)
		return NULL;
	__be16 *ports = (__be16 *)l4;
	if ((void *)(ports + 2) > end)
		return NULL;
	k.port = ports[1];
	const struct steer_val *v = bpf_map_lookup_elem(&steer_keys, &k);
	if (v)
		return v;
	k.port = 0;
	return bpf_map_lookup_elem(&steer_keys, &k);
}

#endif
