package clocksync

// bpf/clock.c, compiled by bpf2go and committed (see scripts/gen-bpf.sh).
// It defines the clock map, whose value holds a bpf_spin_lock and so needs
// the BTF that only a compiled object carries, and the test reader
// clock_read. Its types (clockClockPeer, clockClockOffset, ...) are the Go
// side of bpf/include/clock.h.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -type clock_peer -type clock_offset -type clock_read_result -target bpfel -output-stem clock clock ../bpf/clock.c
