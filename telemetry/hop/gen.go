package hop

// bpf/int_hop.c, compiled by bpf2go and committed (see scripts/gen-bpf.sh).
// Its maps' key and value types, struct hop_config and struct hop_queue
// among them, become Go types.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-stem int_hop intHop ../../bpf/int_hop.c
