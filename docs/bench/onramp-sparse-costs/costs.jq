# Per run with On-Ramp: the CPUs busy, the share of them On-Ramp's programs ran
# (the kernel's BPF statistics, with their own two clock reads per run), the
# data segments stamped and left unstamped, and each On-Ramp program's ns per
# run and runs (tc programs summed over the interfaces). Run as:
# jq -r -f costs.jq sparse/results.json
.variants[] | select(.onramp) | .runs[] | "repeat \(.repeat): cpu \(.cpu_busy*1000|round/10) %, On-Ramp BPF \(.onramp.bpf_busy*10000|round/100) %, stamped \(.onramp.counters.stamped), unstamped \(.onramp.counters.spared // 0); " + ([.bpf[] | select(.program|test("onramp")) | "\(.program) \(.ns_per_run|round) ns x \(.runs)"] | join(", "))
