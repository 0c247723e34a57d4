/* `longattn demo`: the main job on embedded defaults — a short tour that runs
 * each operator family at growing sizes and checks it against float64. */
#include "cli.h"

#pragma weak cli_demo_dense
#pragma weak cli_demo_mhla
#pragma weak cli_demo_focused
#pragma weak cli_demo_sparse

int cli_cmd_demo(int argc, char **argv) {
    static const cli_opt spec[] = {
        {"quick", CLI_OPT_FLAG, "off", "smaller sizes (a few seconds in all)"},
        {"only", CLI_OPT_VALUE, NULL, "comma list of sections: dense,mhla,focused,sparse"},
    };
    cli_args a;
    int r = cli_args_parse(spec, 2, "demo", "A guided tour of longattn on synthetic inputs: every operator family "
                          "at growing sequence lengths (O(N) against O(N^2) time), each checked against a float64 "
                          "reference on a small case. Exits 1 if any check fails.", argc, argv, &a);
    if (r) return r == 1 ? 0 : r;
    if (strcmp(a.device, "cpu") != 0)
        return cli_fail("demo: --device %s: the tour runs on the host (use cpu)", a.device);
    int quick = cli_args_flag(&a, "quick");
    const char *only = cli_args_get(&a, "only");
    cli_bench_cfg sel = {0};
    sel.ops = only;
    struct { const char *name; int (*fn)(FILE *, int); const char *title; } sections[] = {
        {"dense", cli_demo_dense, "Softmax vs linear attention"},
        {"mhla", cli_demo_mhla, "MHLA: multi-head linear attention over token blocks"},
        {"focused", cli_demo_focused, "Focused linear attention and attention-map analysis"},
        {"sparse", cli_demo_sparse, "Sparse attention: DSA and HISA indexers, sparse MLA"},
    };
    printf("longattn demo — %s\n", la_build_info());
    double t0 = cli_now();
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (!cli_bench_selected(&sel, sections[i].name)) continue;
        printf("\n== %s ==\n", sections[i].title);
        if (!sections[i].fn) {
            printf("   (not in this build)\n");
            continue;
        }
        fflush(stdout);
        failed += sections[i].fn(stdout, quick);
        ran++;
        fflush(stdout);
    }
    printf("\ndemo finished in %.1f s: %d section(s), %s\n", cli_now() - t0, ran,
           failed ? "SOME CHECKS FAILED" : "all checks passed");
    return failed ? 1 : 0;
}
