// SPDX-License-Identifier: GPL-2.0
/*
 * powertcp: PowerTCP with in-band network telemetry (PowerTCP, NSDI'22,
 * Algorithm 1; parameters from §3.3).
 *
 * Every ACK that brings a new INT echo (bpf/int_sockops.c puts it in the
 * socket's int_store entry before the CC runs), for each hop i, against
 * the previous echo:
 *     dt      = ts_i - ts_i'                       (ns, mod 2^24)
 *     λ       = (qlen_i - qlen_i')/dt + (tx_i - tx_i')/dt     current
 *     v       = qlen_i + b_i·τ                                 voltage
 *     Γ'_norm = λ·v / (b_i²·τ)
 * and the hop with the largest Γ'_norm is smoothed in with its dt:
 *     Γ = (Γ·(τ - Δt) + Γ'_norm·Δt) / τ,  Δt = min(dt, τ)
 * Every ACK then updates the window,
 *     cwnd = γ·(cwnd_old/Γ + β) + (1 - γ)·cwnd,  rate = cwnd/τ,
 * and cwnd_old is remembered once per RTT.
 *
 * τ is base_rtt or, with INT, the smallest RTT sample less the queueing
 * delay its echo reports (Σ qlen_i/b_i), no less than one GSO burst at
 * host_bw. β = host_bw·τ/N takes that base RTT without the GSO floor
 * (power_int_beta_tau), and at least one MSS.
 *
 * An ACK without INT (no hop on the path, or the peer does not echo) is
 * handled as θ-PowerTCP handles it, from the RTT; the no_int_acks counter
 * says how often that happens, so a path without telemetry is visible.
 */
#include "include/power.h"

char _license[] SEC("license") = "GPL";

INT_STORE_MAP;

static __always_inline void powertcp_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct power_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct power_params *p = power_ack_begin(sk, ca);
	struct int_sk *st;
	__u32 tau, elapsed;

	if (!p)
		return;
	st = bpf_sk_storage_get(&int_store, sk, NULL, 0);
	if (!st || !st->echo_hops) {
		/* No telemetry on this path: act as θ-PowerTCP. */
		stat_add(&stats, STAT_NO_INT_ACKS, 1);
		theta_ack(sk, ca, p, rs);
		return;
	}

	/*
	 * τ sizes each hop's BDP and β. With INT it is the RTT less the
	 * queueing the echo reports, so a flow that joins a congested path
	 * does not take the congested RTT for its base RTT.
	 */
	int_track_base_rtt(&ca->min_rtt_us, rs->rtt_us, st);
	tau = power_tau(p, ca, power_burst_us(sk->sk_gso_max_size, p));
	if (st->echo_seq != ca->prev.echo_seq) {
		stat_add(&stats, STAT_INT_SAMPLES, 1);
		int_power(ca, st, tau, sk->sk_gso_max_size);
	}

	/*
	 * UPDATEWINDOW on every ACK; UPDATEOLD once per RTT, and no more
	 * often than once per τ: when τ has passed and the ACK covers what
	 * was sent since the last remember, or, while loss recovery holds
	 * snd_una back, when an srtt has passed too. Without the second rule
	 * a flow in recovery would keep dividing a stale, large cwnd_old, and
	 * hold its share of a queue it should drain. The τ bound matters when
	 * τ is floored above the RTT (one GSO burst at host_bw): the flow
	 * paces at cwnd/τ, so a window change shows in the telemetry only
	 * about τ later, and remembering cwnd_old every RTT would compound
	 * cwnd_old/Γ several times on the same stale Γ and oscillate.
	 */
	power_update_window(sk, ca, p, rs, tau, power_int_beta_tau(p, ca, tau));
	TRACE_ACK(sk, ca->cwnd, ca->power, int_max_qlen(st), rs->rtt_us > 0 ? rs->rtt_us : 0, TRACE_MODE_INT);
	elapsed = (__u32)tp->tcp_mstamp - ca->old_stamp_us;
	if (elapsed >= tau && (!seq_before(tp->snd_una, ca->last_update_seq) ||
			       elapsed > (tp->srtt_us >> 3))) {
		ca->cwnd_old = ca->cwnd;
		ca->last_update_seq = tp->snd_nxt;
		ca->old_stamp_us = (__u32)tp->tcp_mstamp;
		power_hist_record(sk, ca, rs);
	}
}

POWER_STRUCT_OPS(powertcp, powertcp_on_ack);
