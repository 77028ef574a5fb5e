// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Sluice XDP steering program.
//
// Runs on every datapath interface and decides, per frame, whether the load balancer owns
// it: traffic to a VIP, NAT return traffic from a backend, or FullNAT return traffic to one
// of our SNAT addresses goes to the AF_XDP socket of the receive queue; everything else
// (ARP, ND, BGP, SSH, health-probe replies to our own addresses) goes to the kernel stack.
// The control plane edits the maps while the program runs; it is never reloaded for that.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Key kinds; keep in step with `KeyKind` in steer.rs.
#define KIND_VIP 0      // match the destination: a virtual service
#define KIND_BACKEND 1  // match the source: NAT return traffic from a backend
#define KIND_LOCAL 2    // match the destination: FullNAT return traffic to a SNAT address
#define KIND_HOST 3     // match the destination: the appliance's own address, never steered
#define KIND_ADDR 0x80  // address-only variant (port 0, proto 0) for frames without ports

#define FAMILY_V4 4
#define FAMILY_V6 6

#define CNT_STEERED 0
#define CNT_PASSED 1
#define CNT_NO_SOCKET 2
#define CNT_FRAGMENTS 3
#define CNT_MAX 4

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

// Keep in step with `SteerKey` in steer.rs: 24 bytes, no implicit padding.
struct steer_key {
	__u8 addr[16]; // IPv4 in the first 4 bytes, the rest zero
	__be16 port;   // network order; 0 = any port
	__u8 proto;    // IANA protocol number; 0 in address-only keys
	__u8 kind;
	__u8 family;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct steer_key);
	__type(value, __u32);
} steer_keys SEC(".maps");

// Keep in step with MAX_QUEUES and MAX_INTERFACES in steer.rs.
#define MAX_QUEUES 64
#define MAX_INTERFACES 16

// One program serves every datapath interface, but a socket only accepts frames from the
// interface and queue it is bound to: the XSKMAP slot is interface slot * MAX_QUEUES + queue.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INTERFACES);
	__type(key, __u32);   // ifindex
	__type(value, __u32); // interface slot
} if_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_INTERFACES * MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct flow {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 has_ports;
	__u8 never; // ND and other link-local control: always the kernel's
};

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline int lookup(const __u8 *addr, __be16 port, __u8 proto, __u8 kind,
				  __u8 family, int has_ports)
{
	struct steer_key k;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	if (has_ports) {
		k.kind = kind;
		k.proto = proto;
		k.port = port;
		if (bpf_map_lookup_elem(&steer_keys, &k))
			return 1;
		k.port = 0;
		if (bpf_map_lookup_elem(&steer_keys, &k))
			return 1;
		return 0;
	}
	k.kind = kind | KIND_ADDR;
	return bpf_map_lookup_elem(&steer_keys, &k) != NULL;
}

static __always_inline int parse_ports(void *l4, void *end, struct flow *f)
{
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP) {
		__be16 *ports = l4;
		if ((void *)(ports + 2) > end)
			return -1;
		f->sport = ports[0];
		f->dport = ports[1];
		f->has_ports = 1;
	}
	return 0;
}

static __always_inline int parse(struct xdp_md *ctx, struct flow *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return -1;
	proto = eth->h_proto;
	cur = eth + 1;

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
			struct vlan_hdr *vh = cur;
			if ((void *)(vh + 1) > end)
				return -1;
			proto = vh->proto;
			cur = vh + 1;
		}
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;
		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->ihl < 5)
			return -1;
		f->family = FAMILY_V4;
		f->proto = ip->protocol;
		__builtin_memcpy(f->src, &ip->saddr, 4);
		__builtin_memcpy(f->dst, &ip->daddr, 4);
		if (ip->frag_off & bpf_htons(IP_OFFSET)) {
			// A later fragment carries no ports: steer on the address alone so the
			// engine sees every piece of a datagram whose first piece it owns.
			return 1;
		}
		return parse_ports((void *)ip + ip->ihl * 4, end, f);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		__u8 next;
		if ((void *)(ip6 + 1) > end)
			return -1;
		f->family = FAMILY_V6;
		__builtin_memcpy(f->src, &ip6->saddr, 16);
		__builtin_memcpy(f->dst, &ip6->daddr, 16);
		next = ip6->nexthdr;
		cur = ip6 + 1;
		// Walk a few extension headers; anything deeper is left to the kernel.
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING ||
			    next == IPPROTO_DSTOPTS) {
				__u8 *opt = cur;
				if ((void *)(opt + 2) > end)
					return -1;
				next = opt[0];
				cur = opt + (opt[1] + 1) * 8;
			} else if (next == IPPROTO_FRAGMENT) {
				__u8 *fh = cur;
				if ((void *)(fh + 8) > end)
					return -1;
				next = fh[0];
				cur = fh + 8;
				// Offset is the top 13 bits of bytes 2..3.
				if ((((__u16)fh[2] << 8) | fh[3]) & 0xfff8) {
					f->proto = next;
					return 1;
				}
			}
		}
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
		return parse_ports(cur, end, f);
	}
	return -1;
}

SEC("xdp")
int sluice_steer(struct xdp_md *ctx)
{
	struct flow f;
	int r;
	int owned = 0;

	__builtin_memset(&f, 0, sizeof(f));
	r = parse(ctx, &f);
	if (r < 0 || f.never)
		goto pass;

	if (lookup(f.dst, f.dport, f.proto, KIND_VIP, f.family, f.has_ports) ||
	    lookup(f.dst, f.dport, f.proto, KIND_LOCAL, f.family, f.has_ports))
		owned = 1;
	else if (!lookup(f.dst, 0, 0, KIND_HOST, f.family, 0) &&
		 lookup(f.src, f.sport, f.proto, KIND_BACKEND, f.family, f.has_ports))
		// A backend's reply to a client (NAT mode); its replies to our own address are
		// health probes and stay with the kernel.
		owned = 1;
	if (!owned)
		goto pass;

	__u32 ifindex = ctx->ingress_ifindex;
	__u32 *slot = bpf_map_lookup_elem(&if_slots, &ifindex);
	if (!slot || ctx->rx_queue_index >= MAX_QUEUES) {
		count(CNT_NO_SOCKET);
		goto pass;
	}
	__u32 q = *slot * MAX_QUEUES + ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &q)) {
		count(CNT_NO_SOCKET);
		goto pass;
	}
	if (r == 1)
		count(CNT_FRAGMENTS);
	count(CNT_STEERED);
	return bpf_redirect_map(&xsks, q, XDP_PASS);
pass:
	count(CNT_PASSED);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
