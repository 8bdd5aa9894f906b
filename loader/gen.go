package loader

// The BPF objects are compiled by bpf2go and committed, so that `go build`
// needs no clang. scripts/gen-bpf.sh runs these with the pinned clang and CI
// fails when the committed files differ from a fresh build.
//
// One congestion control per object: cilium/ebpf cannot tell two
// tcp_congestion_ops variables in one ELF apart.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem theta_powertcp thetaPowertcp ../bpf/theta_powertcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem dctcp dctcp ../bpf/dctcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem int_sockops intSockops ../bpf/int_sockops.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem powertcp powertcp ../bpf/powertcp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem int_hop intHop ../bpf/int_hop.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem hpcc hpcc ../bpf/hpcc.c
