// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Benchmark ceiling: the least an XDP forwarder of the benchmark's NAT VIP can do. Every
// IPv4 frame to the VIP gets the backend as its destination (IPv4 and UDP checksums patched
// incrementally) and the egress MACs, and leaves through the one DEVMAP slot with
// XDP_REDIRECT. No lookup, no state, no counters: what Sluice's flow cache is measured
// against in `sluice bench`. Everything else goes to the kernel.
//
// With `cfg.lookup` set (run CL of `sluice bench --flows`), each frame first looks its
// 5-tuple up in `flows`, an LRU hash of the flow cache's own key and value that the loader
// sizes as the appliance's IPv4 flow-cache map and fills with every flow the generator
// sends, and stamps the entry's last_seen with jiffies as the cache does: the ceiling of any
// forwarder built on the kernel's LRU hash, the map's walk and its memory reads included. A
// miss goes to the kernel.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// The flow cache's IPv4 key and its value, `struct cache_key4` and `struct cache_val`: the
// appliance's own, so run CL's map has the cache's layout by construction.
#include "../../../appliance/src/datapath/bpf/structs.h"

// Set before loading (ceiling.rs `ceiling`, at the offsets build.rs generates from the BTF).
struct ceiling_cfg {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__be32 vip;
	__be32 backend;
	__u32 lookup;
};

const volatile struct ceiling_cfg cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} out_port SEC(".maps");

// The loader sizes it as the appliance's IPv4 flow-cache map (max_entries, and value_size
// as the kernel reports it: the same as struct cache_val's when both are built from one tree).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct cache_key4);
	__type(value, struct cache_val);
} flows SEC(".maps");

static __always_inline __u16 csum_replace32(__u16 check, __be32 old, __be32 new)
{
	__u32 sum = (__u16)~check;
	sum += (__u16)~(old >> 16) + (__u16)~(old & 0xffff);
	sum += (new >> 16) + (new & 0xffff);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

SEC("xdp")
int sluice_ceiling(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->daddr != cfg.vip || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	if (cfg.lookup) {
		struct cache_key4 k = {
			.src = ip->saddr,
			.dst = ip->daddr,
			.sport = udp->source,
			.dport = udp->dest,
			.proto = IPPROTO_UDP,
		};
		struct cache_val *v = bpf_map_lookup_elem(&flows, &k);
		if (!v)
			return XDP_PASS;
		__u64 now = bpf_jiffies64();
		if (v->last_seen != now)
			v->last_seen = now;
	}
	__be32 old = ip->daddr;
	__be32 new = cfg.backend;
	ip->daddr = new;
	ip->check = csum_replace32(ip->check, old, new);
	if (udp->check)
		udp->check = csum_replace32(udp->check, old, new);
	__builtin_memcpy(eth->h_dest, (const void *)cfg.dst_mac, 6);
	__builtin_memcpy(eth->h_source, (const void *)cfg.src_mac, 6);
	return bpf_redirect_map(&out_port, 0, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
