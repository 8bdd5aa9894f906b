# Per run with On-Ramp: the floors (a tc and a sockops program that do
# nothing, run where On-Ramp's programs run: --onramp-bpf-costs), and each
# of On-Ramp's programs' ns per run, runs, ns above its floor and ms of CPU
# in the run. Run as: jq -r -f floors.jq floors/results.json
.variants[] | select(.onramp) | .runs[] | .onramp as $o |
"repeat \(.repeat): cpu \(.cpu_busy*1000|round/10) %, On-Ramp BPF \($o.bpf_busy*10000|round/100) %, \([.bpf[] | select(.program|startswith("onramp_")) | .ns_per_run*.runs] | add/1e6|round) ms; floor: tc \($o.tc_floor_ns_per_run|round) ns, sockops \($o.sockops_floor_ns_per_run|round) ns per run\n  " +
([.bpf[] | select(.program|startswith("onramp_")) |
  (if .type == "tc" then $o.tc_floor_ns_per_run else $o.sockops_floor_ns_per_run end) as $f |
  "\(.program): \(.ns_per_run|round) ns x \(.runs) runs, \((.ns_per_run - $f)|round) above the floor; \(.ns_per_run*.runs/1e6|round) ms, of which floor \($f*.runs/1e6|round) ms"] | join("\n  "))
