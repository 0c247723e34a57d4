/* libFuzzer target: the CLI's option parser (cli/args.c). The input is an
 * argv, its arguments separated by NUL bytes. Whatever the bytes, parsing
 * must return 0 (parsed), 1 (--help printed) or 2 (refused, one message),
 * and a parsed argv must satisfy every documented invariant: each option
 * given once with a non-empty value, --device cpu or cuda, --threads in
 * 0..4096; the typed getters then accept or refuse each value without
 * crashing, and an accepted float is finite, in float32 range and nonzero
 * unless written as zero. (make fuzz; run with -close_fd_mask=3: the
 * parser's --help and refusals go to stdout/stderr, libFuzzer keeps its own
 * copy of stderr for its reports.) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const cli_opt spec[] = {
    {"q", CLI_OPT_IN, NULL, "input"},
    {"out", CLI_OPT_OUT, NULL, "output"},
    {"causal", CLI_OPT_FLAG, "off", "flag"},
    {"normalize", CLI_OPT_FLAG, "on", "flag, default on"},
    {"scale", CLI_OPT_VALUE, NULL, "float"},
    {"eps", CLI_OPT_VALUE, "1e-6", "float with a default"},
    {"chunk", CLI_OPT_VALUE, "64", "integer"},
    {"grid", CLI_OPT_VALUE, NULL, "dims"},
};
#define NSPEC ((int)(sizeof spec / sizeof spec[0]))
#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = (char *)malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = (char *)"fuzz";
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    cli_args a;
    int rc = cli_args_parse(spec, NSPEC, "fuzz", "fuzzed", argc, argv, &a);
    if (rc != 0 && rc != 1 && rc != 2) abort();
    if (rc == 0) {
        if (strcmp(a.device, "cpu") != 0 && strcmp(a.device, "cuda") != 0) abort();
        if (a.threads < 0 || a.threads > 4096) abort();
        for (int k = 0; k < NSPEC; k++) {
            if (!a.given[k]) continue;
            if (!a.value[k] || !a.value[k][0]) abort();
            int seen = 0; /* given once: count the spellings in argv */
            for (int i = 1; i < argc; i++) {
                const char *s = argv[i];
                if (strncmp(s, "--", 2) != 0) continue;
                s += 2;
                if (strncmp(s, "no-", 3) == 0 && spec[k].kind == CLI_OPT_FLAG) s += 3;
                size_t n = strlen(spec[k].name);
                if (strncmp(s, spec[k].name, n) == 0 && (s[n] == '\0' || s[n] == '=')) seen++;
            }
            if (seen < 1) abort();
        }
        float f;
        if (cli_args_get(&a, "scale") && cli_args_float(&a, "scale", &f) == 0) {
            if (!isfinite(f)) abort();
            if (f == 0.0f && strtod(cli_args_get(&a, "scale"), NULL) != 0.0) abort();
        }
        if (cli_args_float(&a, "eps", &f) == 0 && !isfinite(f)) abort();
        int64_t iv;
        (void)cli_args_int(&a, "chunk", &iv);
        int nd;
        int64_t dims[3];
        if (cli_args_get(&a, "grid") && cli_args_dims(&a, "grid", &nd, dims) == 0) {
            if (nd < 1 || nd > 3) abort();
            for (int i = 0; i < nd; i++)
                if (dims[i] <= 0) abort();
        }
        (void)cli_args_flag(&a, "causal");
        (void)cli_args_flag(&a, "normalize");
    }
    free(buf);
    return 0;
}
