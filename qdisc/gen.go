package qdisc

// The BPF object is compiled by bpf2go and committed, so that `go build`
// needs no clang. scripts/gen-bpf.sh regenerates it with the pinned clang,
// and CI fails when the committed files differ from a fresh build.
// bpf2go also writes the Go types of the maps' keys and values (struct
// edt_config becomes edtDelayEdtConfig).

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-stem edt_delay edtDelay ../bpf/edt_delay.c
