// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// A VIP's allow and deny lists (issue 46; lb::acl is the engine's copy, config::acl the
// meaning): before flood mode, the stateless answer or the steering do anything with a
// frame to a VIP, its source is looked up in an LPM trie per family whose keys start with
// the VIP's list id (steer_val.acl, 0 for a VIP without lists: no lookup at all), then the
// source's bits. The longest match decides; a VIP with an allow list has a default entry
// (prefix length 32: the id alone) that denies whatever no rule matched. A denied frame is
// dropped here and counted per VIP and list (acl_drops, by the entry's counter slot).
//
// The control plane (datapath/acl.rs) gives a VIP a new id whenever its lists change and
// writes the new id's entries before the steering key points at it, so a frame sees one
// version of a VIP's lists or the other, never half of each. Tenant VIPs (their source is
// inside VXLAN), fragments and frames without ports (ICMP) are left to the engine, which
// checks the same lists.

#ifndef SLUICE_ACL_H
#define SLUICE_ACL_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"

struct acl_key4 {
	__u32 prefixlen; // 32 (the id) + the rule's length
	__be32 id;	 // steer_val.acl, network order
	__u8 addr[4];
};

struct acl_key6 {
	__u32 prefixlen;
	__be32 id;
	__u8 addr[16];
};

struct acl_val {
	enum acl_verdict verdict;
	__u8 pad;
	__u16 counter; // slot in acl_drops
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, ACL_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct acl_key4);
	__type(value, struct acl_val);
} acl4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, ACL_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct acl_key6);
	__type(value, struct acl_val);
} acl6 SEC(".maps");

// Frames dropped per (VIP, list): the slot's meaning is the control plane's.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ACL_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} acl_drops SEC(".maps");

// Whether the lists of `vip` deny the frame's source (counted when they do).
static __always_inline int acl_denied(const struct flow *f, const struct steer_val *vip)
{
	const struct acl_val *v;

	if (!vip->acl || f->frag || !f->has_ports)
		return 0;
	if (f->family == FAMILY_V4) {
		struct acl_key4 k = { .prefixlen = 64, .id = bpf_htonl(vip->acl) };
		__builtin_memcpy(k.addr, f->src, 4);
		v = bpf_map_lookup_elem(&acl4, &k);
	} else {
		struct acl_key6 k = { .prefixlen = 160, .id = bpf_htonl(vip->acl) };
		__builtin_memcpy(k.addr, f->src, 16);
		v = bpf_map_lookup_elem(&acl6, &k);
	}
	if (!v || v->verdict != ACL_DENY)
		return 0;
	__u32 slot = v->counter;
	__u64 *n = bpf_map_lookup_elem(&acl_drops, &slot);
	if (n)
		*n += 1;
	count(CNT_DENIED);
	return 1;
}

#endif
