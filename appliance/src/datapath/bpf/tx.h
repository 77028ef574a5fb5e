// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// How a frame leaves the program: back out of the interface it came in on, or through
// tx_ports to another.

#ifndef SLUICE_TX_H
#define SLUICE_TX_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "maps.h"

// Out of `ifindex` (the egress's slot `tx_port` in tx_ports): back out of the interface the
// frame came in on with XDP_TX where that is the egress's way (TX_XDP_TX), else a redirect;
// an egress missing from tx_ports drops the frame, counted.
static __always_inline int send_to(struct xdp_md *ctx, __u32 ifindex, __u8 tx, __u8 tx_port)
{
	if (ifindex == ctx->ingress_ifindex && tx == TX_XDP_TX)
		return XDP_TX;
	int act = bpf_redirect_map(&tx_ports, tx_port, 0);
	if (act != XDP_REDIRECT) {
		cache_count(CC_NO_EGRESS);
		return XDP_DROP;
	}
	return act;
}

#endif
