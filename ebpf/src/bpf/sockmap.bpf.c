// SPDX-License-Identifier: GPL-2.0
// Respite's loopback accelerator: sockops records established loopback sockets of chosen ports in
// a SOCKHASH; sk_msg hands each message straight to the peer socket's receive queue.
// Kernel docs: Documentation/bpf/map_sockmap.rst; facts and pitfalls: docs/ebpf.md.
//
// Ordering rule: a socket's outgoing bytes go either all through the redirect or, from some
// point on, all through TCP, never back. The receiver drains its redirect queue before its TCP
// queue (tcp_bpf_recvmsg), so "redirect then TCP" keeps order and "TCP then redirect" would not.
// Hence the sticky per-socket state below.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2

// Shapes shared with the loader (ebpf/src/maps.rs): keep in step.
struct sock_key {
	__u32 local_ip4;  // network order, as the kernel gives it
	__u32 remote_ip4; // network order
	__u32 local_port; // host order
	__u32 remote_port;// host order
};

enum counter { INSERTS = 0, INSERT_FAIL = 1, REDIRECTS = 2, REDIRECT_FAIL = 3, N_COUNTERS = 4 };

enum sock_state { UNDECIDED = 0, REDIRECTING = 1, TCP_FOR_LIFE = 2 };

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, struct sock_key);
	__type(value, __u32); // the socket fd user space would insert; aya reads it as RawFd
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} respite_socks SEC(".maps");

// Port filter: bit (port % 64) of word (port / 64).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} respite_ports SEC(".maps");

// [0]: 1 = insert and redirect; 0 = do neither (the kill switch).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} respite_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} respite_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} respite_state SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&respite_counters, &which);
	if (c)
		*c += 1;
}

static __always_inline int enabled(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&respite_settings, &zero);
	return on && *on == 1;
}

static __always_inline int port_listed(__u32 port)
{
	__u32 word = (port >> 6) & 1023;
	__u64 *bits = bpf_map_lookup_elem(&respite_ports, &word);
	return bits && ((*bits >> (port & 63)) & 1);
}

static __always_inline int loopback(__u32 ip4_network_order)
{
	return (bpf_ntohl(ip4_network_order) >> 24) == 127;
}

SEC("sockops")
int respite_sockops(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		return 1;
	if (skops->family != AF_INET || !enabled())
		return 1;
	struct sock_key key = {
		.local_ip4 = skops->local_ip4,
		.remote_ip4 = skops->remote_ip4,
		.local_port = skops->local_port,
		.remote_port = bpf_ntohl(skops->remote_port),
	};
	if (!loopback(key.local_ip4) || !loopback(key.remote_ip4))
		return 1;
	if (!port_listed(key.local_port) && !port_listed(key.remote_port))
		return 1;
	if (bpf_sock_hash_update(skops, &respite_socks, &key, BPF_NOEXIST) == 0)
		count(INSERTS);
	else
		count(INSERT_FAIL);
	return 1;
}

SEC("sk_msg")
int respite_sk_msg(struct sk_msg_md *msg)
{
	struct bpf_sock *sk = msg->sk;
	if (!sk)
		return SK_PASS;
	__u32 *state = bpf_sk_storage_get(&respite_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!state || *state == TCP_FOR_LIFE)
		return SK_PASS;
	if (!enabled()) {
		*state = TCP_FOR_LIFE;
		return SK_PASS;
	}
	// The peer's key: our local side is its remote side.
	struct sock_key peer = {
		.local_ip4 = msg->remote_ip4,
		.remote_ip4 = msg->local_ip4,
		.local_port = bpf_ntohl(msg->remote_port),
		.remote_port = msg->local_port,
	};
	if (bpf_msg_redirect_hash(msg, &respite_socks, &peer, BPF_F_INGRESS) == SK_PASS) {
		*state = REDIRECTING;
		count(REDIRECTS);
	} else {
		// Peer not (or no longer) in the map: this message takes TCP, so every later one must.
		*state = TCP_FOR_LIFE;
		count(REDIRECT_FAIL);
	}
	return SK_PASS;
}

char _license[] SEC("license") = "GPL";
