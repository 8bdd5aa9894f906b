package perack

// The null CC's object is compiled by bpf2go and committed, like the CCs'
// (loader/gen.go); scripts/gen-bpf.sh regenerates it with the pinned clang.

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem null null ../../bpf/perack_null.c

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel -output-stem arith arith ../../bpf/perack_arith.c
