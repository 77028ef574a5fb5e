// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Every map of the program, the flow cache's switch, and the counter bumps. The control
// plane edits the maps while the program runs; it is never reloaded for that. build.rs
// generates the Rust side's table of these maps (names and sizes) from the object:
// datapath/abi.rs `maps`.

#ifndef SLUICE_MAPS_H
#define SLUICE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"

// ---- steering --------------------------------------------------------------------------

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct steer_key);
	__type(value, struct steer_val);
} steer_keys SEC(".maps");

// One program serves every datapath interface, but a socket only accepts frames from the
// interface and queue it is bound to: the XSKMAP slot is interface slot * MAX_QUEUES + queue.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INTERFACES);
	__type(key, __u32);   // ifindex
	__type(value, __u32); // interface slot
} if_slots SEC(".maps");

// Set (1) by the running appliance once its sockets are bound: from then on a frame the
// engine owns that finds no socket (the engine is being handed over to a new process, or
// crashed) is dropped and counted rather than passed to the kernel, whose answer to a flow
// it does not know is a reset. The flow cache goes on forwarding established flows. Unset
// (0), as test runs leave it, such a frame is passed.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hold SEC(".maps");

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

// ---- flow cache --------------------------------------------------------------------------
//
// The flow cache's maps are created by the Rust side (flowcache/mod.rs), which the program
// reuses (steer.rs `load_with_cache`): the sizes that count are the ones there.

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct cache_key4);
	__type(value, struct cache_val);
} flow_cache4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct cache_key6);
	__type(value, struct cache_val);
} flow_cache6 SEC(".maps");

// Per (VIP, backend) counters; slot 0 collects whatever has no slot of its own.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_SLOTS);
	__type(key, __u32);
	__type(value, struct cache_stat);
} cache_stats SEC(".maps");

// Egress interfaces by interface slot: an array, no hashing on the way out.
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, MAX_INTERFACES);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CC_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cache_counters SEC(".maps");

// The front table (front.h): each CPU's copies of the entries it hit.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FRONT_SLOTS);
	__type(key, __u32);
	__type(value, struct front4);
} cache_front4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FRONT_SLOTS);
	__type(key, __u32);
	__type(value, struct front6);
} cache_front6 SEC(".maps");

// The IPv4 slots' numbers, then the IPv6 slots'. Written by the control plane only, through
// an mmap (sys::bpfmem): 8-byte values, since the kernel lays array values out 8 bytes apart.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * FRONT_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} front_gen SEC(".maps");

// Set before loading ([appliance] flow_cache). Read-only data, so with the cache off the
// verifier prunes the cache code and the steering costs what it did without it.
const volatile __u32 cache_on = 0;

// The counter maps' slots, for the object's BTF (and through it the Rust side: abi.rs): the
// kernel takes only a plain 32-bit integer as an array map's key type, so the maps cannot
// carry their keys' enums themselves. The program never reads this.
const volatile struct counter_slots {
	enum steer_counter steer; // counters
	enum cache_counter cache; // cache_counters
	enum flood_counter flood; // flood_counters
} counter_slots = { CNT_MAX, CC_MAX, FL_MAX };

// ---- flood mode --------------------------------------------------------------------------

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flood_conf);
} flood_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flood_cpu);
} flood_cpus SEC(".maps");

// Shared by every CPU, so a source's rate is its own whichever queue its frames land on;
// concurrent refills may lose an update, which only makes a bucket a little more generous.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flood_src);
	__type(value, struct flood_bucket);
} flood_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FL_MAX);
	__type(key, __u32);
	__type(value, __u64);
} flood_counters SEC(".maps");

// ---- stateless answer --------------------------------------------------------------------

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATELESS_VIPS);
	__type(key, __u32);
	__type(value, struct stateless_vip);
} stateless_vips SEC(".maps");

// Every VIP's ring, one after another (RING_STRIDE entries each): the backend's slot in the
// engine's tables.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATELESS_RING_ENTRIES);
	__type(key, __u32);
	__type(value, __u32);
} stateless_rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct stateless_hop);
} stateless_hops SEC(".maps");

// ---- counters ----------------------------------------------------------------------------

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline void cache_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&cache_counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline void flood_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&flood_counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline void count_stat(__u32 slot, __u64 bytes)
{
	struct cache_stat *st = bpf_map_lookup_elem(&cache_stats, &slot);
	if (st) {
		st->packets += 1;
		st->bytes += bytes;
	}
}

#endif
