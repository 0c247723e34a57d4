/* `longattn bench`: time, throughput and GFLOP/s per operator across N. */
#include <stdlib.h>

#include "cli.h"

#pragma weak la_bench_dense
#pragma weak la_bench_mhla
#pragma weak la_bench_sparse

int la_cmd_bench(int argc, char **argv) {
    static const la_opt spec[] = {
        {"json", LA_OPT_FLAG, "off", "print one JSON object per line instead of a table"},
        {"nmin", LA_OPT_VALUE, "1024", "smallest sequence length"},
        {"nmax", LA_OPT_VALUE, "16384", "largest sequence length (powers of two from nmin)"},
        {"d", LA_OPT_VALUE, "64", "head dimension"},
        {"heads", LA_OPT_VALUE, "4", "heads"},
        {"min-time", LA_OPT_VALUE, "0.2", "seconds of repeats per measurement (median reported)"},
        {"ops", LA_OPT_VALUE, NULL, "comma list of operators (softmax,linear,mhla,... default all)"},
    };
    la_args a;
    int r = la_args_parse(spec, 7, "bench", "Times each operator across sequence lengths and prints time, "
                          "tokens/s and GFLOP/s (medians), plus the machine's sgemm peak.", argc, argv, &a);
    if (r) return r == 1 ? 0 : r;
    la_bench_cfg cfg = {0};
    float mt;
    if (la_args_int(&a, "nmin", &cfg.nmin) || la_args_int(&a, "nmax", &cfg.nmax) || la_args_int(&a, "d", &cfg.D) ||
        la_args_int(&a, "heads", &cfg.H) || la_args_float(&a, "min-time", &mt))
        return 2;
    if (cfg.nmin < 1 || cfg.nmax < cfg.nmin || cfg.nmax > (1 << 24))
        return la_cli_fail("bench: need 1 <= --nmin <= --nmax <= 16777216");
    if (cfg.D < 1 || cfg.D > 1024 || cfg.H < 1 || cfg.H > 1024) return la_cli_fail("bench: --d and --heads in 1..1024");
    if (mt <= 0 || mt > 60) return la_cli_fail("bench: --min-time in (0, 60]");
    cfg.min_time = mt;
    cfg.json = la_args_flag(&a, "json");
    cfg.threads = a.threads;
    cfg.ops = la_args_get(&a, "ops");
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
    if (la_bench_dense) rc |= la_bench_dense(&cfg);
    if (la_bench_mhla) rc |= la_bench_mhla(&cfg);
    if (la_bench_sparse) rc |= la_bench_sparse(&cfg);
    return rc;
}
