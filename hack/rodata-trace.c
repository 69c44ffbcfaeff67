/*
 * Filter for hack/profile-rodata-order.sh: reads valgrind lackey's --trace-mem output on stdin
 * and writes, to the file named by argv[1], the offset in the executable of every 8-byte word
 * of it that a load touched (merged with what the file already lists: one file per process).
 *
 * valgrind maps a position-independent executable at 0x108000 on amd64; offsets below SPAN
 * cover the binary's read-only segments.
 */
#include <stdio.h>
#include <stdlib.h>

#define BASE 0x108000UL
#define SPAN 0x4000000UL

static unsigned char seen[SPAN / 8];

static void mark(unsigned long addr) {
    if (addr >= BASE && addr < BASE + SPAN) seen[(addr - BASE) / 8] = 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: rodata-trace OUT < lackey-trace\n");
        return 2;
    }
    FILE *old = fopen(argv[1], "r");
    if (old) {
        unsigned long offset;
        while (fscanf(old, "%lx", &offset) == 1) mark(BASE + offset);
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
