// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Benchmark sink: the backend end of `sluice bench`, attached to the sink namespace's s0.
// On real hardware the sink is another machine whose cost nobody counts; here generator,
// forwarder and sink share one CPU, so the sink must cost as little as possible and the same
// for every forwarder. It counts the frames that arrive rewritten to the backend (IPv4 to
// the backend's address and UDP port) and drops every IPv4 UDP frame before the kernel
// builds an skb for it (no socket lookup, no ICMP port unreachable). UDP that was not
// rewritten is counted apart, so the report can say a forwarder leaked it. Everything else
// (ARP above all) goes to the kernel.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Set before loading (sink.rs `SinkProgram`, at the offsets build.rs generates from the BTF).
struct sink_cfg {
	__be32 backend;
	__be16 port;
	__u16 pad;
};

const volatile struct sink_cfg cfg = {};

// The slots of `sink_counters`.
enum sink_counter : __u32 {
	SINK_DELIVERED = 0, // IPv4 UDP to the backend's address and port: what a run delivered
	SINK_STRAY = 1,	    // any other IPv4 UDP (not rewritten, or a non-first fragment)
	SINK_SLOTS = 2,
};

// The slots, for the object's BTF (and through it sink.rs): the kernel takes only a plain
// 32-bit integer as an array map's key type, so the map cannot carry its keys' enum itself.
// The program never reads this.
const volatile struct sink_slots {
	enum sink_counter slots;
} sink_slots = { SINK_SLOTS };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} sink_counters SEC(".maps");

static __always_inline int count_and_drop(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&sink_counters, &slot);

	if (n)
		*n += 1;
	return XDP_DROP;
}

SEC("xdp")
int sluice_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	// A later fragment carries no UDP header; short or odd headers are not the backend's.
	if (ip->frag_off & bpf_htons(0x1fff) || ip->ihl < 5)
		return count_and_drop(SINK_STRAY);
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > end)
		return count_and_drop(SINK_STRAY);
	if (ip->daddr == cfg.backend && udp->dest == cfg.port)
		return count_and_drop(SINK_DELIVERED);
	return count_and_drop(SINK_STRAY);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
