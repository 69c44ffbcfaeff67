/*
 * Filter for hack/profile-rodata-order.sh: reads valgrind lackey's --trace-mem output on stdin
 * and writes, to the file named by argv[1], the offset in the executable of every 8-byte word
 * of it that a load touched (merged with what the file already lists: one file per process).
 *
 * argv[2] is the address of the executable's file offset 0 in the traced process (hex): the
 * first PT_LOAD's address minus its offset for a position-dependent executable, 0x108000 (where
 * valgrind maps a position-independent one on amd64) plus that for a PIE. Offsets below SPAN
 * cover the binary's read-only segments.
 */
#include <stdio.h>
#include <stdlib.h>

#define SPAN 0x4000000UL

static unsigned char seen[SPAN / 8];
static unsigned long base;

static void mark(unsigned long addr) {
    if (addr >= base && addr < base + SPAN) seen[(addr - base) / 8] = 1;
}

int main(int argc, char **argv) {
    char *rest;
    if (argc != 3 || (base = strtoul(argv[2], &rest, 16), *rest != '\0')) {
        fprintf(stderr, "usage: rodata-trace OUT BASE < lackey-trace\n");
        return 2;
    }
    FILE *old = fopen(argv[1], "r");
    if (old) {
        unsigned long offset;
        while (fscanf(old, "%lx", &offset) == 1) mark(base + offset);
        fclose(old);
    }
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        /* " L addr,size" (load) and " M addr,size" (modify: a load too); not "I" or " S". */
        if (line[0] != ' ' || (line[1] != 'L' && line[1] != 'M')) continue;
        char *end;
        unsigned long addr = strtoul(line + 3, &end, 16);
        unsigned long size = *end == ',' ? strtoul(end + 1, NULL, 10) : 1;
        for (unsigned long a = addr; a < addr + size; a += 8) mark(a);
        mark(addr + size - 1);
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) {
        perror(argv[1]);
        return 1;
    }
    for (unsigned long i = 0; i < SPAN / 8; i++)
        if (seen[i]) fprintf(out, "%lx\n", i * 8);
    return fclose(out) == 0 ? 0 : 1;
}
