// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Benchmark traffic generator: run through BPF_PROG_TEST_RUN with
// BPF_F_TEST_XDP_LIVE_FRAMES, it sends the template frame out of the "ingress" interface
// with XDP_TX. Unlike pktgen.bpf.c it first stores the whole template into the frame:
// live-frame test runs recycle their pages without copying the test input in again, and
// the kernel's forwarding path (the bench's nftables run) rewrites every frame in place
// (destination MAC, TTL, DNAT) before its page comes back. Without the stores the recycled
// frames would carry the sink's MAC and the forwarder's kernel would drop them as "other
// host". A frame shorter than the template is dropped untouched.
//
// With `flows` above one it then makes each frame the next of `flows` UDP flows: flow i
// comes from address addr0 + i / ports and port port0 + i % ports (a per-CPU counter walks
// i round the flow space, so every flow recurs every `flows` frames), both checksums
// updated for the change (RFC 1624). The template must then be IPv4/UDP without options.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// The longest template, in 8-byte words.
#define GEN_WORDS_MAX 32

// Set before loading (generator.rs `GenProgram`, at the offsets build.rs generates from the
// BTF). Read-only after load, so the verifier sees `words` as a constant and the stores
// below as bounded.
struct gen_cfg {
	__u32 words; // template length / 8, 1 to GEN_WORDS_MAX
	__u32 pad;
	__u64 template[GEN_WORDS_MAX];
	__u32 flows; // 0 or 1: the template as it is
	__u32 ports; // source ports per address, at least 1
	__u32 addr0; // the first source address, host order
	__u32 port0; // the first source port
};

const volatile struct gen_cfg cfg = {};

// Frame offsets of an Ethernet + IPv4 (no options) + UDP template.
#define IP_CSUM 24
#define IP_SRC 26
#define UDP_SPORT 34
#define UDP_CSUM 40

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_seq SEC(".maps");

// RFC 1624 eqn. 3: the checksum after one 16-bit word changes from `old` to `new`. Words
// stay in network order: one's complement sums do not care which byte is which.
static __always_inline __u16 csum_update(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + (__u32)new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

// Rewrites the frame's source address and port to flow `i`'s.
static __always_inline int set_flow(__u8 *f, void *end, __u64 i)
{
	__u32 addr = cfg.addr0 + (__u32)(i / cfg.ports);
	__u16 port = (__u16)(cfg.port0 + (__u32)(i % cfg.ports));
	__u16 new_words[3] = {
		bpf_htons((__u16)(addr >> 16)), bpf_htons((__u16)addr), bpf_htons(port)
	};
	__u16 *ip_csum = (__u16 *)(f + IP_CSUM);
	__u16 *src = (__u16 *)(f + IP_SRC);
	__u16 *sport = (__u16 *)(f + UDP_SPORT);
	__u16 *udp_csum = (__u16 *)(f + UDP_CSUM);

	if ((void *)(udp_csum + 1) > end)
		return -1;
	__u16 udp = *udp_csum;
	__u16 ip = *ip_csum;
#pragma unroll
	for (int w = 0; w < 2; w++) {
		ip = csum_update(ip, src[w], new_words[w]);
		udp = csum_update(udp, src[w], new_words[w]);
		src[w] = new_words[w];
	}
	udp = csum_update(udp, *sport, new_words[2]);
	*sport = new_words[2];
	*ip_csum = ip;
	// A zero UDP checksum means "none"; one that computes to zero is sent as 0xffff.
	if (*udp_csum != 0)
		*udp_csum = udp ? udp : 0xffff;
	return 0;
}


SEC("xdp")
int sluice_bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *frame = data;
	__u32 words = cfg.words;

	if (words > GEN_WORDS_MAX || data + words * 8 > end)
		return XDP_DROP;
#pragma unroll
	for (__u32 i = 0; i < GEN_WORDS_MAX; i++) {
		if (i >= words)
			break;
		frame[i] = cfg.template[i];
	}
	if (cfg.flows > 1) {
		__u32 zero = 0;
		__u64 *seq = bpf_map_lookup_elem(&gen_seq, &zero);

		if (!seq || cfg.ports == 0)
			return XDP_DROP;
		__u64 i = *seq % cfg.flows;
		*seq = i + 1;
		if (set_flow(data, end, i))
			return XDP_DROP;
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
