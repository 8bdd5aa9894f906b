// SPDX-License-Identifier: GPL-2.0
/*
 * perack_arith: the per-ACK arithmetic of theta_powertcp, powertcp (INT)
 * and hpcc alone, with no socket, map lookup, counter or statistics
 * clock around it. bench/perack runs each program here under
 * BPF_PROG_TEST_RUN with a repeat count; the kernel times the whole loop
 * once, so a run's mean is the arithmetic plus the test loop's own
 * overhead, which arith_null measures.
 *
 * Each run is one ACK of one flow on a 1 Gbit/s path. It calls the same
 * inline functions the CCs' cong_control programs call (include/power.h,
 * include/hpcc.h, include/ccload.h) on state kept in .bss across runs,
 * with inputs that change from run to run so the compiler cannot fold
 * them away:
 *   - theta_powertcp: an RTT sample folded into the round, the round's
 *     power, the window, and its packets and pacing rate, every run (in
 *     the bench, on a path of a few GSO packets, nearly every ACK ends a
 *     round);
 *   - powertcp: a new one-hop INT echo, the base RTT it implies, the
 *     hop's power, the window, packets and pacing;
 *   - hpcc: the same echo, U, the window, packets and pacing.
 */
#include "include/power.h"
#include "include/hpcc.h"

char _license[] SEC("license") = "GPL";

#define TC_ACT_OK 0

/* The path: 1 Gbit/s, GSO bursts of 64 KiB, 1448-byte segments. */
#define ARITH_BW_BPS 1000000000ULL
#define ARITH_BW_CODE 2 /* int_rate_mbps: 1000 Mbit/s */
#define ARITH_GSO 65536
#define ARITH_MSS 1448
#define ARITH_RTT_US 120
#define ARITH_CLAMP 10000

/*
 * Parameters as the loader writes them for host_bw=1gbit and the other
 * defaults (loader.derivePower fills the derived fields the same way).
 */
struct power_params arith_power_params = {
	.host_bw_bps = ARITH_BW_BPS,
	.gamma = FP_ONE * 9 / 10,
	.expected_flows = 10,
	.host_Bpus_fp = (ARITH_BW_BPS / 8 << FP_SHIFT) / USEC_PER_SEC,
	.beta_Bpus_fp = (ARITH_BW_BPS / 8 << FP_SHIFT) / USEC_PER_SEC / 10,
	.us_per_B_recip = (USEC_PER_SEC << RECIP_SHIFT) / (ARITH_BW_BPS / 8),
};

struct hpcc_params arith_hpcc_params = {
	.host_bw_bps = ARITH_BW_BPS,
	.eta = FP_ONE * 95 / 100,
	.max_stage = 5,
	.expected_flows = 10,
};

/* Per-flow state across runs, and what each run returns, so it is kept. */
struct power_ca arith_theta_ca;
struct power_ca arith_powertcp_ca;
struct hpcc_ca arith_hpcc_ca;
struct int_sk arith_echo;
__u64 arith_step;
__u64 arith_out_pkts;
__u64 arith_out_rate;

/* Starts a flow's state the way init() does, on its first run. */
static __always_inline void arith_power_start(struct power_ca *ca)
{
	if (ca->power)
		return;
	ca->power = FP_ONE;
	ca->cwnd = ca->cwnd_old = power_bdp(&arith_power_params, ARITH_RTT_US);
}

/* What each ACK shows of the flow's use: a window's worth in flight. */
static __always_inline void arith_use(struct cc_use *u, __u64 cwnd, __u64 step)
{
	u->mss = ARITH_MSS;
	u->max_packets_out = cwnd / ARITH_MSS + (step & 3);
	u->delivered = 40 + (step & 7);
	u->interval_us = ARITH_RTT_US + (step & 15);
}

/* The window's packets and pacing rate, as cc_set_window writes them. */
static __always_inline void arith_emit(__u64 cwnd, __u32 tau)
{
	arith_out_pkts = cc_window_pkts(cwnd, ARITH_MSS, ARITH_CLAMP);
	arith_out_rate = cc_pacing_Bps(cwnd, tau, ~0ULL);
}

/*
 * A new one-hop echo at step: 5 µs after the last, the link about 95 %
 * busy (625 bytes per 5 µs is line rate) and a queue of up to 6 KB.
 */
static __always_inline void arith_next_echo(__u64 step)
{
	__u64 t_ns = step * 5000;

	arith_echo.echo[0] = int_hop_word(ARITH_BW_CODE, t_ns, step * 590 + (step & 7) * 16,
					  (step & 15) * 400);
	arith_echo.echo_hops = 1;
	arith_echo.echo_seq = step + 1;
	arith_echo.echo_ns = t_ns;
}

SEC("tc")
int arith_null(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("tc")
int arith_theta(struct __sk_buff *skb)
{
	struct power_ca *ca = &arith_theta_ca;
	const struct power_params *p = &arith_power_params;
	__u64 step = ++arith_step;
	struct cc_use u;
	__u32 tau;

	arith_power_start(ca);
	theta_fold_rtt(ca, ARITH_RTT_US + (step & 31));
	tau = power_tau(p, ca, power_burst_us(ARITH_GSO, p));
	theta_round_power(ca, step * 60, tau);
	arith_use(&u, ca->cwnd, step);
	ca->cwnd = power_window(ca, p, tau, tau, &u);
	ca->cwnd_old = ca->cwnd;
	arith_emit(ca->cwnd, tau);
	return TC_ACT_OK;
}

SEC("tc")
int arith_powertcp(struct __sk_buff *skb)
{
	struct power_ca *ca = &arith_powertcp_ca;
	const struct power_params *p = &arith_power_params;
	__u64 step = ++arith_step;
	struct cc_use u;
	__u32 tau;

	arith_power_start(ca);
	arith_next_echo(step);
	int_track_base_rtt(&ca->min_rtt_us, ARITH_RTT_US + (step & 31), &arith_echo);
	tau = power_tau(p, ca, power_burst_us(ARITH_GSO, p));
	int_power(ca, &arith_echo, tau, ARITH_GSO);
	arith_use(&u, ca->cwnd, step);
	ca->cwnd = power_window(ca, p, tau, power_int_beta_tau(p, ca, tau), &u);
	arith_emit(ca->cwnd, tau);
	return TC_ACT_OK;
}

SEC("tc")
int arith_hpcc(struct __sk_buff *skb)
{
	struct hpcc_ca *ca = &arith_hpcc_ca;
	const struct hpcc_params *p = &arith_hpcc_params;
	__u64 step = ++arith_step;
	struct cc_use u;
	__u32 t;

	if (!ca->u) {
		ca->u = FP_ONE;
		ca->w = ca->wc = bdp_bytes(p->host_bw_bps, ARITH_RTT_US);
	}
	arith_next_echo(step);
	int_track_base_rtt(&ca->min_rtt_us, ARITH_RTT_US + (step & 31), &arith_echo);
	t = hpcc_t(ARITH_GSO, p, ca);
	hpcc_measure(ca, &arith_echo, t, ARITH_GSO);
	arith_use(&u, ca->w, step);
	ca->w = hpcc_ack_window(ca, p, t, (step & 3) == 0, &u);
	arith_emit(ca->w, t);
	return TC_ACT_OK;
}
