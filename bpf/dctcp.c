// SPDX-License-Identifier: GPL-2.0
/*
 * bpf_dctcp: DCTCP (Alizadeh et al.; analysed in "Analysis of DCTCP",
 * SIGMETRICS'11) with the semantics of the kernel's tcp_dctcp:
 *
 *   - once per window of data, α ← (1 - g)·α + g·F, where F is the fraction
 *     of delivered packets that carried CE marks (tp->delivered_ce);
 *   - on a congestion signal the window is cut to cwnd·(1 - α/2);
 *   - on loss (fast recovery or RTO) the window is halved, as Reno does;
 *   - growth is Reno's (tcp_reno_cong_avoid);
 *   - the receiver side echoes CE precisely: when the CE state of incoming
 *     data changes, a delayed ACK is flushed first, so that ECE covers
 *     exactly the marked packets.
 *
 * It sets TCP_CONG_NEEDS_ECN, so a connection it opens sends an ECT SYN,
 * whatever the net.ipv4.tcp_ecn sysctl says. A listener grants ECN to that
 * SYN only when its own CC needs ECN too (even with tcp_ecn=2); otherwise,
 * and when the peer refuses ECN, the socket falls back to "reno" (as the
 * kernel's dctcp does) and the "fallbacks" counter is incremented. A CC set
 * after connect() (iperf3 -C does that) never asks for ECN at all. So:
 * bpf_dctcp on both ends, chosen by sysctl or by setsockopt before
 * connect() or listen().
 *
 * Kernel features left out: PLB (protective load balancing) and get_info.
 * Scales: see include/ccload.h (α uses DCTCP_ALPHA_ONE = 1024).
 */
#include "include/ccload.h"

char _license[] SEC("license") = "GPL";

/* Run-time parameters, written by the loader (ccload attach/set). */
struct dctcp_params {
	__u32 shift_g;		/* g = 2^-shift_g; the kernel's default is 4 */
	__u32 alpha_on_init;	/* initial α, DCTCP_ALPHA_ONE scale */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dctcp_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

static const char fallback_cc[] = "reno";

/* Per-socket state in icsk_ca_priv (CCLOAD_CA_FITS checks that it fits). */
struct dctcp_ca {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;		/* DCTCP_ALPHA_ONE scale */
	__u32 next_seq;		/* end of the current observation window */
	__u32 ce_state;		/* 1 if the last data received carried CE */
	__u32 loss_cwnd;	/* cwnd before the last cut, for undo */
	__u8 ca_state;		/* last TCP_CA_* state seen by set_state */
	__u8 counted;		/* counted in sock_init; release() counts it out */
};
CCLOAD_CA_FITS(struct dctcp_ca);

static __always_inline struct dctcp_params *dctcp_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}

static __always_inline void dctcp_reset_window(const struct tcp_sock *tp,
					       struct dctcp_ca *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(dctcp_init, struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_params *p = dctcp_params();

	if ((tp->ecn_flags & TCP_ECN_OK) ||
	    sk->__sk_common.skc_state == TCP_LISTEN ||
	    sk->__sk_common.skc_state == TCP_CLOSE) {
		__builtin_memset(ca, 0, sizeof(*ca));
		ca->prior_rcv_nxt = tp->rcv_nxt;
		ca->alpha = DCTCP_ALPHA_ONE;
		if (p && p->alpha_on_init <= DCTCP_ALPHA_ONE)
			ca->alpha = p->alpha_on_init;
		dctcp_reset_window(tp, ca);
		ca->counted = 1;
		CC_COUNT_SOCK_INIT();
		return;
	}

	/*
	 * No ECN on this connection: DCTCP has no signal to work with. The
	 * socket is counted as a fallback, not as a user; whether the kernel
	 * calls our release() on the way out of init() depends on its version.
	 */
	ca->counted = 0;
	stat_add(&stats, STAT_FALLBACKS, 1);
	bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, (void *)fallback_cc,
		       sizeof(fallback_cc));
}

/* The window DCTCP cuts cwnd to: cwnd·(1 - α/2), at least 2. */
static __always_inline __u32 dctcp_cut(__u32 cwnd, __u32 alpha)
{
	__u32 cut = (__u32)(((__u64)cwnd * alpha) >> (DCTCP_ALPHA_SHIFT + 1));

	return cwnd - cut > 2 ? cwnd - cut : 2;
}

SEC("struct_ops")
__u32 BPF_PROG(dctcp_ssthresh, struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	return dctcp_cut(cwnd, ca->alpha);
}

/* Once per window of data: fold the CE fraction into α. */
static __always_inline void dctcp_update_alpha(struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_params *p = dctcp_params();
	__u32 g = 4, delivered, delivered_ce, alpha;

	if (seq_before(tp->snd_una, ca->next_seq))
		return;

	if (p && p->shift_g <= DCTCP_ALPHA_SHIFT)
		g = p->shift_g;

	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;

	/*
	 * α ← α·(1 - g) + g·F, rounding as the kernel does: the decay step is
	 * never 0 while α is not, so α reaches 0 once marks stop.
	 */
	alpha -= (alpha >> g) ? (alpha >> g) : alpha;
	if (delivered_ce) {
		stat_add(&stats, STAT_ECN_CE_ACKS, 1);
		delivered_ce <<= DCTCP_ALPHA_SHIFT - g;
		delivered_ce /= delivered > 1 ? delivered : 1;
		alpha += delivered_ce;
		if (alpha > DCTCP_ALPHA_ONE)
			alpha = DCTCP_ALPHA_ONE;
	}
	ca->alpha = alpha;
	dctcp_reset_window(tp, ca);
}

/*
 * Repairs the window after the kernel skipped ssthresh(). A kernel can
 * call a struct_ops CC's callback through a BPF trampoline that does not
 * run the program and returns a stale stack word instead: on one 6.18
 * host kernel this happened about once a second under load, always to
 * ssthresh() on entry to CWR (docs/design.md, "DCTCP in BPF"). The kernel
 * then stores that word as snd_ssthresh, and PRR turns it into a window
 * of hundreds of millions of packets, which empties the send buffer into
 * the bottleneck. No ssthresh this CC or the kernel computes exceeds
 * TCP_INFINITE_SSTHRESH, so a larger one is redone here from prior_cwnd,
 * the window the kernel saved just before it called ssthresh(), on the
 * next ACK. The ACK that carried the skip has sent its burst by then; the
 * repair ends the episode there instead of letting the window decay one
 * cut per round trip.
 */
static __always_inline void dctcp_repair(struct tcp_sock *tp, struct dctcp_ca *ca)
{
	__u32 prior = tp->prior_cwnd;

	if (tp->snd_ssthresh <= TCP_INFINITE_SSTHRESH)
		return;
	ca->loss_cwnd = prior;
	tp->snd_ssthresh = dctcp_cut(prior, ca->alpha);
	if (tp->snd_cwnd > prior)
		tp->snd_cwnd = tp->snd_ssthresh;
	stat_add(&stats, STAT_REPAIRS, 1);
}

SEC("struct_ops")
void BPF_PROG(dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	stat_add(&stats, STAT_ACKS, 1);
	dctcp_repair(tcp_sk(sk), inet_csk_ca(sk));
	dctcp_update_alpha(sk);
}

static __always_inline void dctcp_react_to_loss(struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd;

	stat_add(&stats, STAT_LOSS_EVENTS, 1);
	ca->loss_cwnd = cwnd;
	tp->snd_ssthresh = cwnd >> 1 > 2 ? cwnd >> 1 : 2;
}

SEC("struct_ops")
void BPF_PROG(dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);

	if (new_state == TCP_CA_Recovery && ca->ca_state != TCP_CA_Recovery)
		dctcp_react_to_loss(sk);
	ca->ca_state = new_state;
}

/* Sets or clears the ECE demand that the next ACK will carry. */
static __always_inline void dctcp_ece_demand(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/*
 * Receiver side: incoming data changed CE state. Flush a pending delayed
 * ACK with the old state, then ACK the new state at once.
 */
static __always_inline void dctcp_ce_state_change(struct sock *sk, __u32 new_ce)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct inet_connection_sock *icsk = inet_csk(sk);

	if (ca->ce_state != new_ce) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			dctcp_ece_demand(tp, ca->ce_state);
			bpf_tcp_send_ack(sk, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = new_ce;
	dctcp_ece_demand(tp, new_ce);
}

SEC("struct_ops")
void BPF_PROG(dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		dctcp_ce_state_change(sk, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		dctcp_ce_state_change(sk, 0);
		break;
	case CA_EVENT_LOSS:
		dctcp_react_to_loss(sk);
		break;
	default:
		break;
	}
}

SEC("struct_ops")
__u32 BPF_PROG(dctcp_undo_cwnd, struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);
	__u32 cwnd = tcp_sk(sk)->snd_cwnd;

	return cwnd > ca->loss_cwnd ? cwnd : ca->loss_cwnd;
}

SEC("struct_ops")
void BPF_PROG(dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

/*
 * Whether release() runs for a socket that init() did not count depends on
 * the kernel: 6.1 and 6.12 call it when init() hands the socket to reno,
 * 6.18 does not. Only sockets that init() counted are counted out.
 */
SEC("struct_ops")
void BPF_PROG(dctcp_release, struct sock *sk)
{
	struct dctcp_ca *ca = inet_csk_ca(sk);

	if (ca->counted) {
		ca->counted = 0;
		stat_add(&stats, STAT_SOCK_RELEASE, 1);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops bpf_dctcp = {
	.init = (void *)dctcp_init,
	.release = (void *)dctcp_release,
	.in_ack_event = (void *)dctcp_in_ack_event,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.ssthresh = (void *)dctcp_ssthresh,
	.cong_avoid = (void *)dctcp_cong_avoid,
	.undo_cwnd = (void *)dctcp_undo_cwnd,
	.set_state = (void *)dctcp_set_state,
	.flags = CCLOAD_CC_FLAGS | TCP_CONG_NEEDS_ECN,
	.name = "bpf_dctcp",
};
