// SPDX-License-Identifier: GPL-2.0
/*
 * theta_powertcp: θ-PowerTCP, the RTT-only variant of PowerTCP
 * (PowerTCP, NSDI'22, Appendix D, Algorithm 2; parameters from §3.3).
 *
 * Per ACK with an RTT sample: add it to the round's sum.
 * Once per round (when the ACK covers snd_nxt of the previous update),
 * with RTT the round's mean and t the time:
 *     dθ/dt   = (RTT - prevRTT) / (t - t_prev)
 *     Γ_norm  = (dθ/dt + 1) · RTT / τ
 *     Γ       = (Γ · (τ - Δt) + Γ_norm · Δt) / τ,   Δt = min(t - t_prev, τ)
 *     cwnd    = min(γ · (cwnd_old / Γ + β) + (1 - γ) · cwnd, host_bw · τ)
 *     rate    = cwnd / τ
 *     cwnd_old = cwnd
 * and, at most every 10 ms, the round's delivery rate and the flow's base
 * RTT go into the path history (power_hist) for new flows.
 *
 * τ is the base_rtt parameter or, when it is 0, the flow's least RTT
 * sample (see power_track_base_rtt), which a new flow takes from the path's
 * history when there is one, but no less than the time one GSO burst takes
 * at host_bw. β = host_bw · τ / expected_flows unless beta_bytes is set.
 * A flow starts at line rate, cwnd = host_bw · τ, unless the path's history
 * says recent flows delivered less.
 *
 * The shared machinery is in include/power.h; scales in include/ccload.h.
 */
#include "include/power.h"

char _license[] SEC("license") = "GPL";

POWER_STRUCT_OPS(theta_powertcp, theta_on_ack);
