// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Sluice XDP steering program.
//
// Runs on every datapath interface and decides, per frame, whether the load balancer owns
// it: traffic to a VIP (a tenant VIP's in VXLAN), NAT return traffic from a backend, or
// FullNAT return traffic to one of our SNAT addresses goes to the AF_XDP socket of the
// receive queue; everything else (ARP, ND, BGP, SSH, health-probe replies to our own
// addresses) goes to the kernel stack.
// The control plane edits the maps while the program runs; it is never reloaded for that.
//
// In front of the steering sits the flow cache (flowcache.rs installs and evicts its
// entries): an established flow the AF_XDP engine has already decided is rewritten and sent
// here, in the kernel, byte for byte as lb::process would have done it. Anything the cache
// does not cover (misses, TCP SYN/FIN/RST, fragments, IP options, VLAN tags, extension
// headers, TTL <= 1, bad lengths or header checksums) falls through to the steering below.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Key kinds; keep in step with the KIND_* constants in steer/keys.rs.
#define KIND_VIP 0      // match the destination: a virtual service
#define KIND_BACKEND 1  // match the source: NAT return traffic from a backend
#define KIND_LOCAL 2    // match the destination: FullNAT return traffic to a SNAT address
#define KIND_HOST 3     // match the destination: the appliance's own address, never steered
#define KIND_OUTBOUND 4 // match the destination: an answer to a port of a VIP's outbound range
#define KIND_TENANT 5   // match a VXLAN frame's VNI and inner destination: a tenant VIP
#define KIND_ADDR 0x80  // address-only variant (port 0, proto 0) for frames without ports

#define FAMILY_V4 4
#define FAMILY_V6 6

#define CNT_STEERED 0
#define CNT_PASSED 1
#define CNT_NO_SOCKET 2
#define CNT_FRAGMENTS 3
#define CNT_OUTBOUND 4 // outbound answers the program forwarded to their port's owner itself
#define CNT_TENANT 5   // of the steered frames, VXLAN frames for a tenant VIP
#define CNT_MAX 6

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

// The Rust side reads this layout from the object's BTF (datapath/abi.rs); no implicit
// padding, so the kernel hashes no uninitialised bytes.
struct steer_key {
	__u8 addr[16]; // IPv4 in the first 4 bytes, the rest zero
	__be16 port;   // network order; 0 = any port
	__u8 proto;    // IANA protocol number; 0 in address-only keys
	__u8 kind;
	__u8 family;
	__u8 vni[3];   // KIND_TENANT: the 24-bit VNI, network order; zero in other kinds
};

// What a VIP is to flood mode; keep in step with VMODE_* in steer/keys.rs. Other keys (return
// traffic, our own addresses) carry VMODE_NONE.
#define VMODE_NONE 0
#define VMODE_NAT 1
#define VMODE_FULLNAT 2
#define VMODE_DR 3
#define VMODE_TUNNEL 4 // never in the flow cache: its established flows miss it frame by frame

#define NO_RING 0xffff

struct steer_val {
	__u32 vip;   // the VIP's slot in the engine's tables
	__u16 ring;  // its slot in stateless_vips (DR VIPs), or NO_RING; KIND_OUTBOUND keys:
		     // the port owner's backend slot (mode VMODE_DR), or NO_RING
	__u8 mode;   // VMODE_*
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct steer_key);
	__type(value, struct steer_val);
} steer_keys SEC(".maps");

// Keep in step with MAX_QUEUES and MAX_INTERFACES in steer.rs (defines are not in BTF).
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
	__u8 tcp_flags; // TCP only, when the frame holds byte 13 of the header
	__u8 frag;	// a fragment, the first one included
	__u16 l4off;	// where the L4 header starts in the frame, when has_ports
};

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

// The key's value, or NULL when nothing matches.
static __always_inline const struct steer_val *lookup(const __u8 *addr, __be16 port, __u8 proto,
						      __u8 kind, __u8 family, int has_ports)
{
	struct steer_key k;
	const struct steer_val *v;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	if (has_ports) {
		k.kind = kind;
		k.proto = proto;
		k.port = port;
		v = bpf_map_lookup_elem(&steer_keys, &k);
		if (v)
			return v;
		k.port = 0;
		return bpf_map_lookup_elem(&steer_keys, &k);
	}
	k.kind = kind | KIND_ADDR;
	return bpf_map_lookup_elem(&steer_keys, &k);
}

// `l4` is the L4 header, `off` bytes into the frame (counted alongside the pointer: the
// verifier only lets privileged programs subtract packet pointers).
static __always_inline int parse_ports(void *l4, void *end, struct flow *f, __u32 off)
{
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP) {
		__be16 *ports = l4;
		if ((void *)(ports + 2) > end)
			return -1;
		f->sport = ports[0];
		f->dport = ports[1];
		f->has_ports = 1;
		f->l4off = (__u16)off;
		if (f->proto == IPPROTO_TCP && (void *)((__u8 *)l4 + 14) <= end)
			f->tcp_flags = ((__u8 *)l4)[13];
	}
	return 0;
}

static __always_inline int parse(struct xdp_md *ctx, struct flow *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur;
	__u32 off;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return -1;
	proto = eth->h_proto;
	cur = eth + 1;
	off = sizeof(*eth);

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
			struct vlan_hdr *vh = cur;
			if ((void *)(vh + 1) > end)
				return -1;
			proto = vh->proto;
			cur = vh + 1;
			off += sizeof(*vh);
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
		if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			f->frag = 1;
		if (ip->frag_off & bpf_htons(IP_OFFSET)) {
			// A later fragment carries no ports: steer on the address alone so the
			// engine sees every piece of a datagram whose first piece it owns.
			return 1;
		}
		return parse_ports((void *)ip + ip->ihl * 4, end, f, off + ip->ihl * 4);
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
		off += sizeof(*ip6);
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
				off += (opt[1] + 1) * 8;
			} else if (next == IPPROTO_FRAGMENT) {
				__u8 *fh = cur;
				if ((void *)(fh + 8) > end)
					return -1;
				next = fh[0];
				cur = fh + 8;
				off += 8;
				f->frag = 1;
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
		return parse_ports(cur, end, f, off);
	}
	return -1;
}

// ---- tenant VIPs (issue 23) ------------------------------------------------------------
//
// A tenant VIP lives in a tenant's virtual network: its frames arrive in VXLAN (RFC 7348),
// UDP to VXLAN_PORT at one of the appliance's own addresses, and are matched on the VNI and
// the inner destination address, port and protocol (KIND_TENANT keys, no address-only twin).
// What is looked into here is exactly what lb/process/tenant.rs takes: the VXLAN I flag set,
// an untagged inner Ethernet frame, inner IPv4 that is not a fragment or inner IPv6 whose
// next header is TCP or UDP itself. Everything else (another VNI, port or protocol, a VLAN
// tag, a fragment, a truncated frame) goes on to the ordinary steering, which leaves it to
// the kernel: a tenant's addresses mean nothing in the underlay.

#define VXLAN_PORT 4789	     // lb::process::TENANT_VXLAN_PORT
#define VXLAN_FLAG_I 0x08     // the VNI is valid
#define VXLAN_HLEN 8
#define UDP_HLEN 8
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


// Flood mode (below): a flow the engine established pays its source's bucket back.
static __always_inline void flood_refund(const void *addr, __u8 family);

// ---- flow cache ------------------------------------------------------------------------

// IPv4 and IPv6 flows live in maps of their own: the kernel hashes the whole key on every
// lookup (jhash, 12 bytes a round), so a 16-byte IPv4 key costs less than half a 40-byte
// one. The Rust side reads both layouts from the object's BTF (datapath/abi.rs).
struct cache_key4 {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct cache_key6 {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

#define ACT_NAT 1 // TTL - 1, then the addresses and ports `flags` name (NAT, FullNAT, both ways)
#define ACT_DR 2  // MACs only

#define SET_SRC 1
#define SET_DST 2

// cache_val.carry (lb::process proxyhdr and toa; a FullNAT TCP VIP with client_address).
#define CARRY_SEQ 1 // client -> backend: seq + delta; the first data segment (seq == base)
		    // goes to the engine, which puts the PROXY header in again
#define CARRY_ACK 2 // backend -> client: ack and SACK edges beyond base less delta
#define CARRY_TOA 4 // client -> backend: segments acknowledging exactly base go to the
		    // engine, which adds the TOA option

// cache_val.tx: how a hit that leaves through the interface it came in on is sent.
#define TX_XDP_TX 0    // XDP_TX (real NICs)
#define TX_REDIRECT 1  // a DEVMAP redirect: veth kicks its peer's NAPI after an XDP_TX only
		       // when the peer runs an XDP program, not when NAPI is on for GRO, so
		       // XDP_TX'd frames would wait there for the next frame the kernel sends

// The Rust side reads this layout (and the keys') from the object's BTF: datapath/abi.rs.
struct cache_val {
	__u64 last_seen; // jiffies of the last hit; the workers only look for change
	__u8 new_src[16];
	__u8 new_dst[16];
	__be16 new_sport;
	__be16 new_dport;
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 ifindex; // egress
	__u32 stat;    // slot in cache_stats
	__u8 action;
	__u8 flags;
	__u8 tx;
	__u8 tx_port;  // the egress's slot in tx_ports
	__u32 carry_base;  // host order: where the client-address rewrite starts (CARRY_*)
	__u8 carry;	   // CARRY_* bits
	__u8 carry_delta;  // bytes the backend's view of the client's stream runs ahead
	__u8 pad[2];
};
_Static_assert(__builtin_offsetof(struct cache_val, src_mac) ==
		       __builtin_offsetof(struct cache_val, dst_mac) + 6 &&
	       __builtin_offsetof(struct cache_val, dst_mac) % 4 == 0,
	       "cache_send copies both MACs as three aligned words");
_Static_assert(__builtin_offsetof(struct cache_val, new_src) % 4 == 0 &&
		       __builtin_offsetof(struct cache_val, new_dst) % 4 == 0,
	       "set_addr4 loads a new address as one aligned word");

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

// Keep in step with STAT_SLOTS in flowcache/mod.rs.
#define STAT_SLOTS 4096

struct cache_stat {
	__u64 packets;
	__u64 bytes;
};

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

// Keep in step with CC_* in flowcache/mod.rs: misses (owned frames that went to the engine), hits
// dropped because their egress interface is not in tx_ports. (Slot 0 is unused: hits are
// counted per (VIP, backend) in cache_stats.)
#define CC_MISS 1
#define CC_NO_EGRESS 2
#define CC_MAX 3

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CC_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cache_counters SEC(".maps");

// Set before loading ([appliance] flow_cache). Read-only data, so with the cache off the
// verifier prunes the cache code and the steering costs what it did without it.
const volatile __u32 cache_on = 0;

static __always_inline void cache_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&cache_counters, &idx);
	if (v)
		*v += 1;
}


#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// lb::process's fold64: a one's-complement sum folded to 16 bits, the same value without
// branches. Every sum here is a few dozen terms of at most 32 bits, far below 2^47, and for
// those three 16-bit steps are enough: after the first the sum is under 2^31 + 2^16, after
// the second at most 0x18000, and the third adds the last carry back in. A positive sum's
// fold is the one value in 1..=0xffff congruent to it modulo 0xffff, so it is the value
// lb::process computes with its 32-bit steps first (the golden fixtures check the bytes).
static __always_inline __u16 fold64(__u64 x)
{
	x = (x & 0xffff) + (x >> 16);
	x = (x & 0xffff) + (x >> 16);
	x = (x & 0xffff) + (x >> 16);
	return (__u16)x;
}

static __always_inline __u64 not16(__u16 v)
{
	return (__u64)(__u16)~v;
}

static __always_inline __u64 not32(__u32 v)
{
	return (__u64)(__u32)~v;
}

// The L4 checksum patch of L4Csum::patch_delta: an absent IPv4 UDP checksum stays absent and
// a computed zero becomes 0xffff there.
//
// The arithmetic runs on the words as they sit in the frame, without byte swaps: a one's-
// complement sum of byte-swapped words is the byte-swapped sum (RFC 1071, 2.(B)), so the
// bytes written are the ones lb::process writes from host-order arithmetic (the golden
// fixtures check it).
static __always_inline void patch_l4(__be16 *csum, __u64 delta, int udp4)
{
	__u16 old = *csum;
	if (udp4 && old == 0)
		return;
	__u16 c = ~fold64(not16(old) + delta);
	if (udp4 && c == 0)
		c = 0xffff;
	*csum = c;
}

// Writes `new_port` over `port`; returns the checksum delta (as loaded, like patch_l4).
static __always_inline __u64 swap_port(__be16 *port, __be16 new_port)
{
	__u16 old = *port;
	*port = new_port;
	return not16(old) + (__u16)new_port;
}

// Writes a new IPv4 address and port over a frame's; adds the changes to the IP header's
// and the L4 checksum's sums (as loaded, see patch_l4).
static __always_inline void set_addr4(__be32 *addr, const __u8 *new_addr, __be16 *port,
				      __be16 new_port, __u64 *ip_acc, __u64 *l4_acc)
{
	__u32 o = *addr;
	// new_src and new_dst are 4-aligned in struct cache_val (asserted there): one load.
	__u32 n = *(const __u32 *)new_addr;
	*addr = n;
	__u64 d = not32(o) + n;
	*ip_acc += d;
	*l4_acc += d + swap_port(port, new_port);
}

// The same for an IPv6 address (no header checksum).
static __always_inline void set_addr6(__u32 *addr, const __u8 *new_addr, __be16 *port,
				      __be16 new_port, __u64 *l4_acc)
{
	const __u32 *n = (const __u32 *)new_addr;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		*l4_acc += not32(addr[i]) + n[i];
		addr[i] = n[i];
	}
	*l4_acc += swap_port(port, new_port);
}

static __always_inline void count_stat(__u32 slot, __u64 bytes)
{
	struct cache_stat *st = bpf_map_lookup_elem(&cache_stats, &slot);
	if (st) {
		st->packets += 1;
		st->bytes += bytes;
	}
}

// The L4 header of a cacheable frame with `avail` bytes after the IP header: its checksum
// field, or NULL for what the cache leaves to the engine (not TCP/UDP, bad lengths, and TCP
// SYN/FIN/RST: handshake and teardown move the engine's connection state).
static __always_inline __be16 *l4_csum(__u8 *l4, void *end, __u8 proto, __u32 avail)
{
	if (proto == IPPROTO_TCP) {
		if (avail < 20 || (void *)(l4 + 20) > end)
			return NULL;
		__u32 doff = (l4[12] >> 4) * 4;
		if (doff < 20 || doff > avail)
			return NULL;
		if (l4[13] & (TCP_SYN | TCP_FIN | TCP_RST))
			return NULL;
		return (__be16 *)(l4 + 16);
	}
	if (proto == IPPROTO_UDP) {
		if (avail < 8 || (void *)(l4 + 8) > end)
			return NULL;
		__u32 ulen = ((__u32)l4[4] << 8) | l4[5];
		if (ulen < 8 || ulen > avail)
			return NULL;
		return (__be16 *)(l4 + 6);
	}
	return NULL;
}

// lb::process::tcpopt::unshift: a backend-side number in the client's space.
static __always_inline __u32 carry_unshift(__u32 x, __u32 base, __u32 delta)
{
	__s32 d = (__s32)(x - base);
	if (d <= 0)
		return x;
	if ((__u32)d < delta)
		return base;
	return x - delta;
}

// The SACK option of the TCP header at `l4` (20 bytes known to be in the frame) in one of
// the two layouts stacks send: "NOP NOP SACK" right after the fixed header, or after "NOP
// NOP TS" (Linux, the BSDs and Windows with timestamps). Returns 0 with its offset and
// length in *sack and *slen (0 for no options or timestamps only), -1 for any other layout:
// those frames go to the engine, whose walk (lb::process::tcpopt) takes every layout. Two
// fixed layouts cost the verifier a handful of states; a general walk over the options
// costs it states exponential in the walk's steps, beyond its budget beside the rest.
static __always_inline int carry_find_sack(__u8 *l4, void *end, __u32 *sack, __u32 *slen)
{
	__u32 doff = (l4[12] >> 4) * 4;
	__u32 off = 20;
	if (doff == 20)
		return 0;
	if ((void *)(l4 + 24) > end)
		return -1;
	if (l4[20] == 1 && l4[21] == 1 && l4[22] == 8 && l4[23] == 10) {
		if (doff == 32)
			return 0;
		off = 32;
	}
	__u8 *p = l4 + off;
	if ((void *)(p + 4) > end)
		return -1;
	if (p[0] != 1 || p[1] != 1 || p[2] != 5)
		return -1;
	__u32 len = p[3];
	// One to four blocks, ending the header (both layouts leave it 4-byte aligned).
	if (len != 10 && len != 18 && len != 26 && len != 34)
		return -1;
	if (off + 2 + len != doff)
		return -1;
	*sack = off + 2;
	*slen = len;
	return 0;
}

// The client-address part of an entry (cache_val.carry) on a TCP segment at `l4` (20 bytes
// known to be in the frame): 0 with the sequence numbers rewritten and their checksum
// change added to `l4_acc`, -1 for a frame the engine must see.
static __always_inline int carry_tcp(__u8 *l4, void *end, const struct cache_val *v,
				     __u64 *l4_acc)
{
	// l4_csum checked this, but through another register the verifier may not connect.
	if ((void *)(l4 + 20) > end)
		return -1;
	__u32 *seqp = (__u32 *)(l4 + 4);
	__u32 *ackp = (__u32 *)(l4 + 8);
	__u32 base = v->carry_base;
	int ack = l4[13] & 0x10;
	// Every check before any store: a declined frame goes to the engine untouched.
	if ((v->carry & CARRY_TOA) && ack && bpf_ntohl(*ackp) == base)
		return -1;
	if ((v->carry & CARRY_SEQ) && bpf_ntohl(*seqp) == base)
		return -1;
	__u32 sack = 0, slen = 0;
	if ((v->carry & CARRY_ACK) && carry_find_sack(l4, end, &sack, &slen))
		return -1;
	if (v->carry & CARRY_SEQ) {
		__u32 o = *seqp;
		__u32 n = bpf_htonl(bpf_ntohl(o) + v->carry_delta);
		*seqp = n;
		*l4_acc += not32(o) + n;
	}
	if ((v->carry & CARRY_ACK) && ack) {
		__u32 o = *ackp;
		__u32 n = bpf_htonl(carry_unshift(bpf_ntohl(o), base, v->carry_delta));
		*ackp = n;
		*l4_acc += not32(o) + n;
	}
	if (sack) {
		// Edges at sack + 2, + 6, ...: carry_find_sack checked the option lies inside the
		// header, which lies inside the frame; the bounds below are for the verifier.
#pragma unroll
		for (int i = 0; i < 8; i++) {
			__u32 e = sack + 2 + i * 4;
			if (e + 4 > sack + slen || e > 56)
				break;
			__u32 *w = (__u32 *)(l4 + e);
			if ((void *)(w + 1) > end)
				break;
			__u32 o = *w;
			__u32 n = bpf_htonl(carry_unshift(bpf_ntohl(o), base, v->carry_delta));
			*w = n;
			*l4_acc += not32(o) + n;
		}
	}
	return 0;
}

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

// After the rewrite: MACs, activity, counters, and out.
static __always_inline int cache_send(struct xdp_md *ctx, struct ethhdr *eth,
				      struct cache_val *v, __u64 len)
{
	// dst_mac and src_mac are the frame's first 12 bytes in order, 4-aligned in the
	// entry: three word copies, not twelve byte copies (the verifier lets a frame be
	// written unaligned where the CPU does that cheaply, as x86 does).
	const __u32 *mac = (const __u32 *)v->dst_mac;
	__u32 *hdr = (__u32 *)eth;
	hdr[0] = mac[0];
	hdr[1] = mac[1];
	hdr[2] = mac[2];
	// Hits are the sum of the slots' packets: one per-CPU counter per hit, not two.
	count_stat(v->stat, len);
	return send_to(ctx, v->ifindex, v->tx, v->tx_port);
}

// ---- the cache's front table ------------------------------------------------------------
//
// A hit in flow_cache4/6 costs the kernel's jhash of the key and a walk of its bucket: about
// 25 ns a frame at 256 flows, a quarter of the XDP_REDIRECT ceiling's whole frame (`sluice
// bench --flows`, run CL against run C). So each CPU keeps a direct-mapped copy of the entries it hit, at a slot
// of our own hash (a multiply per 8 bytes of key): a hit there is one inlined array read and
// a key compare. A copy serves only the jiffy it was made in, so every flow still finds its
// entry in the LRU map once a jiffy on each CPU it arrives on: the entry's last_seen (the
// workers' ageing), the flood refund of its first hit and the LRU's order stay what they
// were. And the control plane makes every copy of a key stale the moment it installs or
// evicts that key (flowcache/mod.rs `FlowCache::install`, `evict`): it writes a new number
// into front_gen at the key's slot, through an mmap, without a syscall, and a copy is good
// only while that number is the one read before its lookup. A slot holds the first flow
// that arrives in a jiffy; another flow of the same slot takes the map's path until the
// next jiffy (a frame costs one array read more than before then, and nothing is written).
//
// Keep FRONT_BITS and the multipliers in step with flowcache/layout.rs `front_index`.
#define FRONT_BITS 11
#define FRONT_SLOTS (1 << FRONT_BITS)
#define FRONT_M0 0x9e3779b97f4a7c15ULL
#define FRONT_M1 0xc2b2ae3d27d4eb4fULL
#define FRONT_M2 0x165667b19e3779f9ULL
#define FRONT_M3 0xd6e8feb86659fd93ULL
#define FRONT_M4 0xff51afd7ed558ccdULL

// The map keys (struct cache_key4, cache_key6) as 8-byte words, little-endian: a word's
// low half holds the lower bytes. The frame's fields are put together in registers: a hit
// reads no key back from the stack that was just written there in pieces.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "front keys assume little-endian");
_Static_assert(sizeof(struct cache_key4) == 2 * 8, "cache_key4 is two words");
_Static_assert(sizeof(struct cache_key6) == 5 * 8, "cache_key6 is five words");

struct front4 {
	__u64 key[2]; // struct cache_key4
	__u64 seen; // jiffies when copied: the copy serves that jiffy only
	__u64 gen;  // front_gen at the slot before the copy's lookup
	struct cache_val val;
};

struct front6 {
	__u64 key[5]; // struct cache_key6
	__u64 seen;
	__u64 gen;
	struct cache_val val;
};

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

// An entry found in the LRU map: stamped with the jiffy (activity for the workers' ageing,
// flowcache/worker.rs `WorkerCache::tick`; a busy flow dirties its entry once a jiffy, not
// every frame), its first hit paying its source's flood bucket back.
static __always_inline void cache_stamp(struct cache_val *v, const void *src, __u8 family,
					__u64 now)
{
	if (!v->last_seen)
		flood_refund(src, family);
	if (v->last_seen != now)
		v->last_seen = now;
}

// The entry of the IPv4 key whose words are `w`: this CPU's front copy, else the LRU map's
// (then copied to the front when the slot is free this jiffy or holds the same key); NULL
// for a miss.
static __always_inline struct cache_val *cache_find4(const __u64 w[2], __u64 now)
{
	__u32 slot = (__u32)((w[0] * FRONT_M0 + w[1] * FRONT_M1) >> (64 - FRONT_BITS));
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front4 *fe = bpf_map_lookup_elem(&cache_front4, &slot);
	if (!gen || !fe)
		return NULL;
	__u64 g = *(volatile __u64 *)gen;
	int same = fe->key[0] == w[0] && fe->key[1] == w[1];
	if (same && fe->seen == now && fe->gen == g)
		return &fe->val;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache4, w);
	if (!v)
		return NULL;
	cache_stamp(v, w, FAMILY_V4, now);
	if (same || fe->seen != now) {
		fe->key[0] = w[0];
		fe->key[1] = w[1];
		fe->seen = now;
		fe->gen = g;
		__builtin_memcpy(&fe->val, v, sizeof(fe->val));
	}
	return v;
}

// The same for an IPv6 key.
static __always_inline struct cache_val *cache_find6(const __u64 w[5], __u64 now)
{
	__u32 fslot = (__u32)((w[0] * FRONT_M0 + w[1] * FRONT_M1 + w[2] * FRONT_M2 +
			       w[3] * FRONT_M3 + w[4] * FRONT_M4) >> (64 - FRONT_BITS));
	__u32 slot = fslot + FRONT_SLOTS;
	__u64 *gen = bpf_map_lookup_elem(&front_gen, &slot);
	struct front6 *fe = bpf_map_lookup_elem(&cache_front6, &fslot);
	if (!gen || !fe)
		return NULL;
	__u64 g = *(volatile __u64 *)gen;
	int same = fe->key[0] == w[0] && fe->key[1] == w[1] && fe->key[2] == w[2] &&
		   fe->key[3] == w[3] && fe->key[4] == w[4];
	if (same && fe->seen == now && fe->gen == g)
		return &fe->val;
	struct cache_val *v = bpf_map_lookup_elem(&flow_cache6, w);
	if (!v)
		return NULL;
	cache_stamp(v, w, FAMILY_V6, now);
	if (same || fe->seen != now) {
#pragma unroll
		for (int i = 0; i < 5; i++)
			fe->key[i] = w[i];
		fe->seen = now;
		fe->gen = g;
		__builtin_memcpy(&fe->val, v, sizeof(fe->val));
	}
	return v;
}

// Two 32-bit words as one key word (the first at the lower address).
static __always_inline __u64 word2(__u32 lo, __u32 hi)
{
	return (__u64)lo | ((__u64)hi << 32);
}

// IPv4: returns an XDP action when the cache forwards the frame, -1 to fall through.
static __always_inline int cache_forward4(struct xdp_md *ctx, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end)
		return -1;
	// Version 4 without options (IHL 5): one byte, 0x45.
	if (*(__u8 *)ip != 0x45)
		return -1;
	if (ip->frag_off & bpf_htons(0x3fff))
		return -1;
	__u32 tot = bpf_ntohs(ip->tot_len);
	// Older verifiers (6.12) lose a value's bounds through the byte swap, then refuse the
	// pointer arithmetic below; the mask (kept by the barrier) gives them back.
	barrier_var(tot);
	tot &= 0xffff;
	if (tot < 20 || (void *)ip + tot > end)
		return -1;
	// The engine drops a bad header checksum; leave that to it. One's-complement sums do
	// not care about byte order, so the words are summed as loaded.
	__u32 *w = (void *)ip;
	if (fold64((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) != 0xffff)
		return -1;
	__u8 proto = ip->protocol;
	__u8 *l4 = (void *)(ip + 1);
	__be16 *csum = l4_csum(l4, end, proto, tot - 20);
	if (!csum)
		return -1;
	__be16 *ports = (__be16 *)l4;
	if ((void *)(ports + 2) > end)
		return -1;
	// struct cache_key4 as words: src, dst; sport, dport, proto.
	__u64 k[2] = {
		word2(ip->saddr, ip->daddr),
		word2((__u32)ports[0] | ((__u32)ports[1] << 16), proto),
	};
	// jiffies is a plain load (the verifier inlines the helper; bpf_ktime_get_coarse_ns is a
	// call, 2 ns a hit).
	struct cache_val *v = cache_find4(k, bpf_jiffies64());
	if (!v)
		return -1;

	if (v->action == ACT_NAT) {
		if (ip->ttl <= 1)
			return -1;
		// Sums as loaded (see patch_l4). TTL is the first byte of its 16-bit word with the
		// protocol: one less TTL is that word minus htons(0x100).
		__u64 l4_acc = 0;
		if (v->carry && (proto != IPPROTO_TCP || carry_tcp(l4, end, v, &l4_acc)))
			return -1;
		__u16 *tw = (__u16 *)&ip->ttl;
		__u16 old = *tw;
		__u16 nw = old - bpf_htons(0x100);
		__u64 ip_acc = not16(old) + nw;
		*tw = nw;
		if (v->flags & SET_SRC)
			set_addr4(&ip->saddr, v->new_src, &ports[0], v->new_sport, &ip_acc, &l4_acc);
		if (v->flags & SET_DST)
			set_addr4(&ip->daddr, v->new_dst, &ports[1], v->new_dport, &ip_acc, &l4_acc);
		ip->check = (__u16)~fold64(not16(ip->check) + ip_acc);
		patch_l4(csum, l4_acc, proto == IPPROTO_UDP);
	} else if (v->action != ACT_DR) {
		return -1;
	}
	return cache_send(ctx, eth, v, (__u64)(end - data));
}

// IPv6 (no extension headers): as cache_forward4.
static __always_inline int cache_forward6(struct xdp_md *ctx, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(ip6 + 1) > end)
		return -1;
	if (ip6->version != 6)
		return -1;
	__u32 avail = bpf_ntohs(ip6->payload_len);
	barrier_var(avail); // as tot in cache_forward4
	avail &= 0xffff;
	if ((void *)(ip6 + 1) + avail > end)
		return -1;
	__u8 proto = ip6->nexthdr;
	__u8 *l4 = (void *)(ip6 + 1);
	__be16 *csum = l4_csum(l4, end, proto, avail);
	if (!csum)
		return -1;
	__be16 *ports = (__be16 *)l4;
	if ((void *)(ports + 2) > end)
		return -1;
	// struct cache_key6 as words: src, dst (two each); sport, dport, proto.
	const __u32 *sa = (const __u32 *)&ip6->saddr;
	const __u32 *da = (const __u32 *)&ip6->daddr;
	__u64 k[5] = {
		word2(sa[0], sa[1]),
		word2(sa[2], sa[3]),
		word2(da[0], da[1]),
		word2(da[2], da[3]),
		word2((__u32)ports[0] | ((__u32)ports[1] << 16), proto),
	};
	struct cache_val *v = cache_find6(k, bpf_jiffies64());
	if (!v)
		return -1;

	if (v->action == ACT_NAT) {
		if (ip6->hop_limit <= 1)
			return -1;
		__u64 l4_acc = 0;
		if (v->carry && (proto != IPPROTO_TCP || carry_tcp(l4, end, v, &l4_acc)))
			return -1;
		ip6->hop_limit -= 1;
		if (v->flags & SET_SRC)
			set_addr6((__u32 *)&ip6->saddr, v->new_src, &ports[0], v->new_sport, &l4_acc);
		if (v->flags & SET_DST)
			set_addr6((__u32 *)&ip6->daddr, v->new_dst, &ports[1], v->new_dport, &l4_acc);
		patch_l4(csum, l4_acc, 0);
	} else if (v->action != ACT_DR) {
		return -1;
	}
	return cache_send(ctx, eth, v, (__u64)(end - data));
}

// ---- flood mode ------------------------------------------------------------------------
//
// A spoofed-source flood (SYN, ACK or UDP to a VIP) misses the flow cache frame by frame, and
// at full rate it fills the AF_XDP rx ring, where legitimate first packets are dropped with
// the flood's. Flood mode sheds it here, before the ring. What it polices are the frames
// that may open a flow or belong to none, and that an established flow does not send at its
// data rate: a TCP SYN without ACK to any VIP; and, with the cache on, every frame of a
// cached mode (NAT, FullNAT, DR) the cache missed, since those modes' established flows hit
// it (a FIN or RST of a cached flow included: flood_cached_teardown). Tunnel VIPs are never cached, so their non-SYN frames and their UDP are never policed:
// an established tunnel flow is never shed. Every CPU counts the policed frames, and above
// `threshold` of them a second it switches the mode on. While it is on, each source address
// gets a token bucket (`src_rate` frames a second, `src_burst` deep) in an LRU map: a
// flooding source is cut to its rate and the rest is dropped here, counted. A source earns
// its tokens back with flows that prove themselves: the first frame the flow cache forwards
// for a flow, or its first FIN or RST the cache holds an entry for (the engine saw its
// handshake, or its second datagram, and installed it), puts
// FLOOD_REFUND tokens back in its source's bucket, so many clients behind one NAT address
// open as many flows as they complete, while spoofed sources, which never complete one,
// stay at their rate. The mode switches off after a second below half the threshold. The
// control plane writes `flood_conf` at every commit ([flood] in the config) and reads the
// counters and states.

#define FLOOD_WINDOW_NS 100000000ULL // 100 ms: the detector's window
#define FLOOD_QUIET_WINDOWS 10	     // windows under half the threshold before the mode ends
#define NS_PER_SEC 1000000000ULL
#define FLOOD_MAX_IDLE_NS (10 * NS_PER_SEC) // refill cap: keeps the arithmetic in 64 bits
#define FLOOD_REFUND 4 // tokens a proven flow pays back: about what its handshake, first
		       // data and teardown cost in misses before and after it is cached

// Keep in step with FL_* in steer.rs.
#define FL_FIRST 0    // VIP frames that may open a flow (the detector's input)
#define FL_ADMITTED 1 // of those, passed on while the mode was on (inside their bucket)
#define FL_SHED 2     // dropped while the mode was on (source over its bucket)
#define FL_ON 3	      // switches on
#define FL_OFF 4      // switches off
#define FL_NO_ROOM 5  // sources without a bucket (the LRU insert failed): let through
#define FL_REFUNDED 6 // proven flows that paid their source's bucket back
#define FL_STATELESS 7 // answered here from the VIP's ring while the mode was on
#define FL_MAX 8

struct flood_conf {
	__u64 threshold; // first frames a second (per CPU) that switch the mode on; 0: never
	__u64 src_rate;	 // frames a second one source may send while the mode is on
	__u64 src_burst; // the bucket's depth, in frames
};

struct flood_cpu {
	__u64 window_start; // ns (bpf_ktime_get_ns)
	__u64 window_count; // first frames in the window
	__u64 last_seen;    // ns of the last first frame (the control plane's "still flooding")
	__u32 on;
	__u32 quiet; // consecutive quiet windows while on
};

struct flood_src {
	__u8 addr[16]; // IPv4 in the first 4 bytes, the rest zero
	__u8 family;
	__u8 pad[3];
};

struct flood_bucket {
	__u64 credit; // tokens * NS_PER_SEC, at most src_burst * NS_PER_SEC
	__u64 last;   // ns of the last refill
};

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

static __always_inline void flood_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&flood_counters, &idx);
	if (v)
		*v += 1;
}

// The detector: one more first frame on this CPU; returns whether the mode is on.
static __always_inline int flood_detect(struct flood_cpu *st, const struct flood_conf *c,
					__u64 now)
{
	__u64 elapsed = now - st->window_start;
	if (elapsed >= FLOOD_WINDOW_NS) {
		// The window's rate, per second; a long gap is a quiet stretch of its length.
		__u64 rate = st->window_count * NS_PER_SEC / elapsed;
		__u64 windows = elapsed / FLOOD_WINDOW_NS;
		if (st->on) {
			if (rate * 2 < c->threshold)
				st->quiet += windows > FLOOD_QUIET_WINDOWS ? FLOOD_QUIET_WINDOWS : windows;
			else
				st->quiet = 0;
			if (st->quiet >= FLOOD_QUIET_WINDOWS) {
				st->on = 0;
				st->quiet = 0;
				flood_count(FL_OFF);
			}
		}
		st->window_start = now;
		st->window_count = 0;
	}
	st->window_count += 1;
	st->last_seen = now;
	// On as soon as this window alone holds a second's threshold's share.
	if (!st->on && st->window_count * (NS_PER_SEC / FLOOD_WINDOW_NS) > c->threshold) {
		st->on = 1;
		st->quiet = 0;
		flood_count(FL_ON);
	}
	return st->on;
}

// The source's bucket: returns whether the frame may go on.
static __always_inline int flood_admit(const struct flow *f, const struct flood_conf *c,
				       __u64 now)
{
	struct flood_src k;
	__builtin_memset(&k, 0, sizeof(k));
	__builtin_memcpy(k.addr, f->src, 16);
	k.family = f->family;
	__u64 cap = c->src_burst * NS_PER_SEC;
	struct flood_bucket *b = bpf_map_lookup_elem(&flood_buckets, &k);
	if (!b) {
		// A new source starts with a full bucket, less this frame.
		struct flood_bucket nb = { .credit = cap - NS_PER_SEC, .last = now };
		if (bpf_map_update_elem(&flood_buckets, &k, &nb, BPF_ANY))
			flood_count(FL_NO_ROOM);
		return 1;
	}
	__u64 idle = now - b->last;
	if (idle > FLOOD_MAX_IDLE_NS)
		idle = FLOOD_MAX_IDLE_NS;
	__u64 credit = b->credit + idle * c->src_rate;
	if (credit > cap)
		credit = cap;
	b->last = now;
	if (credit < NS_PER_SEC) {
		b->credit = credit;
		return 0;
	}
	b->credit = credit - NS_PER_SEC;
	return 1;
}

// A proven flow's first cached frame: its source's bucket, if it has one, gets
// FLOOD_REFUND tokens back (up to its depth). Outside a flood no source has a bucket and
// this is one failed lookup per new cache entry.
static __always_inline void flood_refund(const void *addr, __u8 family)
{
	struct flood_src k;
	__builtin_memset(&k, 0, sizeof(k));
	if (family == FAMILY_V4)
		__builtin_memcpy(k.addr, addr, 4);
	else
		__builtin_memcpy(k.addr, addr, 16);
	k.family = family;
	struct flood_bucket *b = bpf_map_lookup_elem(&flood_buckets, &k);
	if (!b)
		return;
	__u32 zero = 0;
	const struct flood_conf *c = bpf_map_lookup_elem(&flood_conf, &zero);
	if (!c)
		return;
	__u64 cap = c->src_burst * NS_PER_SEC;
	__u64 credit = b->credit + FLOOD_REFUND * NS_PER_SEC;
	b->credit = credit > cap ? cap : credit;
	flood_count(FL_REFUNDED);
}

// A FIN or RST of a flow the cache holds: the program hands teardown to the engine without
// looking the cache up (l4_csum), so it would count as a miss. Only a flow the engine saw
// complete its handshake has an entry, so such a frame is not policed, and the entry's first
// sighting pays its source back as a first hit does: a short connection whose handshake ACK
// and first data both reach the engine before the entry is installed (they leave the
// client back to back) still proves itself at its FIN. The lookup costs one map lookup per
// FIN or RST to a cached VIP while the mode is enabled.
static __always_inline int flood_cached_teardown(const struct flow *f)
{
	if (f->proto != IPPROTO_TCP || !(f->tcp_flags & (TCP_FIN | TCP_RST)) ||
	    (f->tcp_flags & TCP_SYN))
		return 0;
	struct cache_val *v;
	if (f->family == FAMILY_V4) {
		struct cache_key4 k;
		__builtin_memset(&k, 0, sizeof(k));
		__builtin_memcpy(&k.src, f->src, 4);
		__builtin_memcpy(&k.dst, f->dst, 4);
		k.sport = f->sport;
		k.dport = f->dport;
		k.proto = f->proto;
		v = bpf_map_lookup_elem(&flow_cache4, &k);
	} else {
		struct cache_key6 k;
		__builtin_memset(&k, 0, sizeof(k));
		__builtin_memcpy(k.src, f->src, 16);
		__builtin_memcpy(k.dst, f->dst, 16);
		k.sport = f->sport;
		k.dport = f->dport;
		k.proto = f->proto;
		v = bpf_map_lookup_elem(&flow_cache6, &k);
	}
	if (!v)
		return 0;
	if (!v->last_seen) {
		flood_refund(f->src, f->family);
		// Activity for the workers' ageing, and the mark that this flow has paid back.
		v->last_seen = bpf_jiffies64();
	}
	return 1;
}

// Whether flood mode polices this VIP frame (see the section's comment).
static __always_inline int flood_policed(const struct flow *f, const struct steer_val *vip)
{
	int cached = cache_on && vip->mode != VMODE_TUNNEL;
	if (!f->has_ports)
		return 0;
	if (f->proto == IPPROTO_TCP)
		return (f->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN || cached;
	return f->proto == IPPROTO_UDP && cached;
}

// ---- stateless answer ------------------------------------------------------------------
//
// While flood mode is on, a DR VIP's policed frames (first packets, and misses of no cached
// flow) are answered here from the VIP's Maglev ring instead of being policed: the engine's
// stateless answer (lb::process::flow `stateless`), byte for byte. The flow hash is
// lb/hash.rs's (jhash2 over the VIP's hash fields with FLOW_SEED, the key's words loaded as
// they sit in memory), the ring slot is hash % M, and the frame leaves with the backend's
// next-hop MACs, nothing else changed. No state is made anywhere: once the flood ends, the
// flow's later frames reach the engine, which has no entry for them and gives the same
// answer (and a flow that was cached keeps hitting the cache, which is looked up first).
// The control plane fills the maps with every table version (steer.rs `set_stateless`).
// Needs the flow cache's egress map, so only with the cache on.

// Keep in step with steer.rs STATELESS_*.
#define STATELESS_VIPS 32
#define STATELESS_RING_ENTRIES (STATELESS_VIPS * 65537) // 8 MiB of u32 backend slots
#define BACKEND_SLOTS 4096
#define FLOW_SEED 0x51751ce0u // lb/hash.rs FLOW_SEED
#define JHASH_INITVAL 0xdeadbeefu
#define HASH_5 0 // the VIP's hash fields (lb/hash.rs HashFields)
#define HASH_3 1
#define HASH_2 2

struct stateless_vip {
	__u32 vip;  // the VIP's slot in the engine's tables (a reload moves ring slots)
	__u32 base; // the VIP's first entry in stateless_rings
	__u32 m;    // its ring size; 0: no ring (no backend takes new flows)
	__u8 hash;  // HASH_*
	__u8 pad[3];
};

// A backend's next hop (lb::NextHop) as the DR rewrite uses it.
struct stateless_hop {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 ifindex; // egress
	__u8 ok;       // 0: no next hop known (the engine asks for it)
	__u8 tx;       // TX_* for a hop out of the interface the frame came in on
	__u8 tx_port;  // the egress's slot in tx_ports
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATELESS_VIPS);
	__type(key, __u32);
	__type(value, struct stateless_vip);
} stateless_vips SEC(".maps");

// Every VIP's ring, one after another: the backend's slot in the engine's tables.
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

static __always_inline __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

// include/linux/jhash.h's __jhash_mix and __jhash_final.
#define JHASH_MIX(a, b, c)                                                                 \
	do {                                                                               \
		a -= c; a ^= rol32(c, 4); c += b;                                          \
		b -= a; b ^= rol32(a, 6); a += c;                                          \
		c -= b; c ^= rol32(b, 8); b += a;                                          \
		a -= c; a ^= rol32(c, 16); c += b;                                         \
		b -= a; b ^= rol32(a, 19); a += c;                                         \
		c -= b; c ^= rol32(b, 4); b += a;                                          \
	} while (0)

#define JHASH_FINAL(a, b, c)                                                               \
	do {                                                                               \
		c ^= b; c -= rol32(b, 14);                                                 \
		a ^= c; a -= rol32(c, 11);                                                 \
		b ^= a; b -= rol32(a, 25);                                                 \
		c ^= b; c -= rol32(b, 16);                                                 \
		a ^= c; a -= rol32(c, 4);                                                  \
		b ^= a; b -= rol32(a, 14);                                                 \
		c ^= b; c -= rol32(b, 24);                                                 \
	} while (0)

// lb::hash::FlowKey::hash: jhash2 over 4 words (IPv4) or 10 (IPv6), FLOW_SEED.
static __always_inline __u32 flow_hash(const struct flow *f, __u8 fields)
{
	__u32 w[10];
	__builtin_memcpy(w, f->src, 16);
	__builtin_memcpy(&w[4], f->dst, 16);
	// sport then dport in network order, loaded as one little-endian word.
	__u32 ports = fields == HASH_5 ? (__u32)f->sport | ((__u32)f->dport << 16) : 0;
	__u32 proto = fields == HASH_2 ? 0 : f->proto;
	__u32 a, b, c;
	if (f->family == FAMILY_V4) {
		a = b = c = JHASH_INITVAL + (4 << 2) + FLOW_SEED;
		a += w[0];
		b += w[4];
		c += ports;
		JHASH_MIX(a, b, c);
		a += proto;
		JHASH_FINAL(a, b, c);
		return c;
	}
	a = b = c = JHASH_INITVAL + (10 << 2) + FLOW_SEED;
	a += w[0];
	b += w[1];
	c += w[2];
	JHASH_MIX(a, b, c);
	a += w[3];
	b += w[4];
	c += w[5];
	JHASH_MIX(a, b, c);
	a += w[6];
	b += w[7];
	c += ports;
	JHASH_MIX(a, b, c);
	a += proto;
	JHASH_FINAL(a, b, c);
	return c;
}

// An untagged IPv4 frame without options or IPv6 frame without extension headers, not a
// fragment: what the stateless answer takes (the rest goes on to the policing and the
// engine). `parse` has read the headers already; this repeats the checks on the bytes.
static __always_inline int plain(struct ethhdr *eth, void *end)
{
	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return 0;
		return *(__u8 *)ip == 0x45 && !(ip->frag_off & bpf_htons(IP_MF | IP_OFFSET));
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		return ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP;
	}
	return 0;
}

// The frame to backend slot `backend` with its next hop's MACs and nothing else (the DR
// rewrite): an XDP action, or -1 when no next hop is known.
static __always_inline int dr_to_backend(struct xdp_md *ctx, struct ethhdr *eth, __u32 backend)
{
	const struct stateless_hop *hop = bpf_map_lookup_elem(&stateless_hops, &backend);
	if (!hop || !hop->ok)
		return -1;
	__builtin_memcpy(eth->h_dest, hop->dst_mac, 6);
	__builtin_memcpy(eth->h_source, hop->src_mac, 6);
	return send_to(ctx, hop->ifindex, hop->tx, hop->tx_port);
}

// The stateless answer for a DR VIP's frame: an XDP action, or -1 when there is none here
// (another mode, no ring, no next hop, a VLAN tag, options, extension headers or a
// fragment) and the frame goes on to the policing and the engine.
static __always_inline int stateless_answer(struct xdp_md *ctx, const struct flow *f,
					    const struct steer_val *vip)
{
	if (!cache_on || vip->mode != VMODE_DR || vip->ring == NO_RING)
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (!plain(eth, end))
		return -1;
	__u32 r = vip->ring;
	const struct stateless_vip *sv = bpf_map_lookup_elem(&stateless_vips, &r);
	if (!sv || sv->m == 0 || sv->vip != vip->vip)
		return -1;
	__u32 idx = sv->base + flow_hash(f, sv->hash) % sv->m;
	const __u32 *backend = bpf_map_lookup_elem(&stateless_rings, &idx);
	if (!backend)
		return -1;
	return dr_to_backend(ctx, eth, *backend);
}

// An answer to a DR VIP's outbound port (issue 23): to the backend that owns the port, its
// MACs and nothing else, as the engine's lb/process/outbound.rs does; -1 sends the frame to
// the engine (a tunnel VIP, no owner or next hop known, the cache off, a VLAN tag, options,
// extension headers or a fragment). No state: the key says who owns the port.
static __always_inline int outbound_answer(struct xdp_md *ctx, const struct steer_val *o)
{
	if (!cache_on || o->mode != VMODE_DR || o->ring == NO_RING)
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (!plain(eth, end))
		return -1;
	return dr_to_backend(ctx, eth, o->ring);
}

// A VIP frame on its way to the engine: -1 to steer it on, else what flood mode does with
// it (XDP_DROP when its source is over its rate, the stateless answer's action).
static __always_inline int flood_action(struct xdp_md *ctx, const struct flow *f,
					const struct steer_val *vip)
{
	if (!flood_policed(f, vip))
		return -1;
	__u32 zero = 0;
	const struct flood_conf *c = bpf_map_lookup_elem(&flood_conf, &zero);
	struct flood_cpu *st = bpf_map_lookup_elem(&flood_cpus, &zero);
	if (!c || !st || c->threshold == 0)
		return -1;
	if (flood_cached_teardown(f))
		return -1;
	__u64 now = bpf_ktime_get_ns();
	flood_count(FL_FIRST);
	if (!flood_detect(st, c, now))
		return -1;
	int act = stateless_answer(ctx, f, vip);
	if (act >= 0) {
		flood_count(FL_STATELESS);
		return act;
	}
	if (flood_admit(f, c, now)) {
		flood_count(FL_ADMITTED);
		return -1;
	}
	flood_count(FL_SHED);
	return XDP_DROP;
}

SEC("xdp")
int sluice_steer(struct xdp_md *ctx)
{
	struct flow f;
	int r;
	int owned = 0;

	if (cache_on) {
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct ethhdr *eth = data;
		int act = -1;
		if ((void *)(eth + 1) <= end) {
			if (eth->h_proto == bpf_htons(ETH_P_IP))
				act = cache_forward4(ctx, data, end);
			else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
				act = cache_forward6(ctx, data, end);
		}
		if (act >= 0 && act <= XDP_REDIRECT)
			return act;
	}

	__builtin_memset(&f, 0, sizeof(f));
	r = parse(ctx, &f);
	if (r < 0 || f.never)
		goto pass;

	// A tenant VIP's VXLAN frame: to the engine as it is, without flood mode (its policing
	// and stateless answer see the outer headers) and never a flow cache miss (the cache
	// holds no tenant flows). Any other VXLAN frame goes on as an ordinary frame.
	int tenant = tenant_vip(ctx, &f) != NULL;
	const struct steer_val *vip = NULL;
	if (tenant)
		owned = 1;
	else if ((vip = lookup(f.dst, f.dport, f.proto, KIND_VIP, f.family, f.has_ports))) {
		int act = flood_action(ctx, &f, vip);
		if (act >= 0)
			return act;
		owned = 1;
	} else if (lookup(f.dst, f.dport, f.proto, KIND_LOCAL, f.family, f.has_ports))
		owned = 1;
	else if ((vip = lookup(f.dst, f.dport, f.proto, KIND_OUTBOUND, f.family, f.has_ports))) {
		int act = outbound_answer(ctx, vip);
		if (act >= 0) {
			count(CNT_OUTBOUND);
			return act;
		}
		owned = 1;
	}
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
	if (tenant)
		count(CNT_TENANT);
	count(CNT_STEERED);
	if (cache_on && !tenant)
		cache_count(CC_MISS);
	return bpf_redirect_map(&xsks, q, XDP_PASS);
pass:
	count(CNT_PASSED);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
