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

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// The longest template, in 8-byte words.
#define GEN_WORDS_MAX 32

// Set before loading (generator.rs `GenProgram`): keep the layout in step. Read-only
// after load, so the verifier sees `words` as a constant and the stores below as bounded.
struct gen_cfg {
	__u32 words; // template length / 8, 1 to GEN_WORDS_MAX
	__u32 pad;
	__u64 template[GEN_WORDS_MAX];
};

const volatile struct gen_cfg cfg = {};

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
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
