// SPDX-License-Identifier: GPL-2.0
/*
 * theta_powertcp: θ-PowerTCP, the RTT-only variant of PowerTCP
 * (PowerTCP, NSDI'22, Appendix D, Algorithm 2; parameters from §3.3).
 *
 * Per ACK with an RTT sample:
 *     dθ/dt   = (RTT - prevRTT) / (t - t_prev)
 *     Γ_norm  = (dθ/dt + 1) · RTT / τ
 *     Γ       = (Γ · (τ - Δt) + Γ_norm · Δt) / τ,   Δt = min(t - t_prev, τ)
 * Once per RTT (when the ACK covers snd_nxt of the previous update):
 *     cwnd    = γ · (cwnd_old / Γ + β) + (1 - γ) · cwnd
 *     rate    = cwnd / τ
 * where cwnd_old is the window remembered at the previous update, i.e.
 * the window the acknowledged data was sent with.
 *
 * τ is the base_rtt parameter or, when it is 0, the flow's minimum smoothed
 * RTT (see power_track_base_rtt), but no less than the time one GSO burst
 * takes at host_bw (see cc_gso_burst_us).
 * β = host_bw · τ / expected_flows unless beta_bytes is set.
 * A flow starts at line rate: cwnd = host_bw · τ.
 *
 * The shared machinery is in include/power.h; scales in include/ccload.h.
 */
#include "include/power.h"

char _license[] SEC("license") = "GPL";

POWER_STRUCT_OPS(theta_powertcp, theta_on_ack);
