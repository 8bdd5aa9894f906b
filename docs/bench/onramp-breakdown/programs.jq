# Per run with On-Ramp, each of On-Ramp's programs' ns per run and runs, and
# the data segments stamped and spared: for the builds without the floors
# (null, parse). Run as: jq -r -f programs.jq null/results.json
.variants[] | select(.onramp) | .runs[] |
"repeat \(.repeat): cpu \(.cpu_busy*1000|round/10) %, On-Ramp BPF \(.onramp.bpf_busy*10000|round/100) %, stamped \(.onramp.counters.stamped), spared \(.onramp.counters.spared // 0); " +
([.bpf[] | select(.program|startswith("onramp_")) | "\(.program) \(.ns_per_run|round) ns x \(.runs)"] | join(", "))
