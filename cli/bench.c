/* `longattn bench`: time, throughput and GFLOP/s per operator across N. */
#include <stdlib.h>

#include "cli.h"

#pragma weak cli_bench_dense
#pragma weak cli_bench_mhla
#pragma weak cli_bench_sparse

int cli_cmd_bench(int argc, char **argv) {
    static const cli_opt spec[] = {
        {"json", CLI_OPT_FLAG, "off", "print one JSON object per line instead of a table"},
        {"nmin", CLI_OPT_VALUE, "1024", "smallest sequence length"},
        {"nmax", CLI_OPT_VALUE, "16384", "largest sequence length (powers of two from nmin)"},
        {"d", CLI_OPT_VALUE, "64", "head dimension"},
        {"heads", CLI_OPT_VALUE, "4", "heads"},
        {"min-time", CLI_OPT_VALUE, "0.2", "seconds of repeats per measurement (median reported)"},
        {"ops", CLI_OPT_VALUE, NULL, "comma list of operators (softmax,linear,mhla,... default all)"},
    };
    cli_args a;
    int r = cli_args_parse(spec, 7, "bench", "Times each operator across sequence lengths and prints time, "
                          "tokens/s and GFLOP/s (medians), plus the machine's sgemm peak.", argc, argv, &a);
    if (r) return r == 1 ? 0 : r;
    if (strcmp(a.device, "cpu") != 0)
        return cli_fail("bench: --device %s: the table times the CPU paths; GPU benchmarks are tests/cuda/gpu_*.sh (use cpu)", a.device);
    cli_bench_cfg cfg = {0};
    float mt;
    if (cli_args_int(&a, "nmin", &cfg.nmin) || cli_args_int(&a, "nmax", &cfg.nmax) || cli_args_int(&a, "d", &cfg.D) ||
        cli_args_int(&a, "heads", &cfg.H) || cli_args_float(&a, "min-time", &mt))
        return 2;
    if (cfg.nmin < 1 || cfg.nmax < cfg.nmin || cfg.nmax > (1 << 24))
        return cli_fail("bench: need 1 <= --nmin <= --nmax <= 16777216");
    if (cfg.D < 1 || cfg.D > 1024 || cfg.H < 1 || cfg.H > 1024) return cli_fail("bench: --d and --heads in 1..1024");
    if (mt <= 0 || mt > 60) return cli_fail("bench: --min-time in (0, 60]");
    cfg.min_time = mt;
    cfg.json = cli_args_flag(&a, "json");
    cfg.threads = a.threads;
    cfg.ops = cli_args_get(&a, "ops");
    cfg.out = stdout;
    if (!cfg.json) {
        la_context *c = NULL;
        int th = cfg.threads;
        if (la_context_create(&c) == LA_OK) {
            la_context_set_threads(c, cfg.threads);
            la_context_get_threads(c, &th);
            la_context_destroy(c);
        }
        printf("longattn bench — %s, threads=%d\n", la_build_info(), th);
    }
    int rc = 0;
    if (cli_bench_dense) rc |= cli_bench_dense(&cfg);
    if (cli_bench_mhla) rc |= cli_bench_mhla(&cfg);
    if (cli_bench_sparse) rc |= cli_bench_sparse(&cfg);
    return rc;
}
