// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Sluice traffic generator for benchmarks and tests.
//
// Run through BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, the kernel builds a real
// frame from the test input for every repetition and this program bounces it out of the
// "ingress" interface with XDP_TX: millions of frames per second into a veth pair, with no
// userspace copy per frame. The receiving end needs a native XDP program (or GRO) to accept
// XDP-transmitted frames; the appliance's steering program is one.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int sluice_pktgen(struct xdp_md *ctx)
{
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
