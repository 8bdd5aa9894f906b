package loader

// The BPF objects are compiled by bpf2go and committed, so that `go build`
// needs no clang. scripts/gen-bpf.sh runs these with the pinned clang and CI
// fails when the committed files differ from a fresh build.
//
// One congestion control per object: cilium/ebpf cannot tell two
// tcp_congestion_ops variables in one ELF apart.
//
// -no-global-types: bpf2go would otherwise write Go types for every map's
// key and value, and a struct_ops map's value is struct tcp_congestion_ops,
// full of function pointers, which has no Go form. The types Go and C do
// share are named with -type instead: the trace record, struct
// cc_trace_event of bpf/include/ccload.h, the same in every CC that
// traces; its Go type comes from theta_powertcp's object. The parameter
// blocks are not among them: their layout is read from the object's BTF
// at load time (params.go), which also checks it.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -type cc_trace_event -target bpfel -output-stem theta_powertcp thetaPowertcp ../bpf/theta_powertcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem dctcp dctcp ../bpf/dctcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem powertcp powertcp ../bpf/powertcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem hpcc hpcc ../bpf/hpcc.c
