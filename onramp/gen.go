package onramp

// bpf/onramp.c (the tc programs, one object per interface) and
// bpf/onramp_sockops.c (the sockops program, one per cgroup), compiled by
// bpf2go and committed (see scripts/gen-bpf.sh). Their shared types, from
// bpf/include/onramp.h, become Go types (onrampOnrampConfig, ...).

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -type onramp_config -type onramp_flow_key -type onramp_flow -type onramp_peer -type onramp_trace_event -target bpfel -output-stem onramp onramp ../bpf/onramp.c
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -output-stem onramp_sockops onrampSockops ../bpf/onramp_sockops.c
