package sockops

// bpf/int_sockops.c, compiled by bpf2go and committed (see scripts/gen-bpf.sh).
// Its maps' key and value types, and struct int_config, become Go types.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-stem int_sockops intSockops ../../bpf/int_sockops.c
