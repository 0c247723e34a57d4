/* `longattn demo`: the main job on embedded defaults — a short tour that runs
 * each operator family at growing sizes and checks it against float64. */
#include "cli.h"

#pragma weak la_demo_dense
#pragma weak la_demo_mhla
#pragma weak la_demo_focused
#pragma weak la_demo_sparse

int la_cmd_demo(int argc, char **argv) {
    static const la_opt spec[] = {
        {"quick", LA_OPT_FLAG, "off", "smaller sizes (a few seconds in all)"},
        {"only", LA_OPT_VALUE, NULL, "comma list of sections: dense,mhla,focused,sparse"},
    };
    la_args a;
    int r = la_args_parse(spec, 2, "demo", "A guided tour of longattn on synthetic inputs: every operator family "
                          "at growing sequence lengths (O(N) against O(N^2) time), each checked against a float64 "
                          "reference on a small case. Exits 1 if any check fails.", argc, argv, &a);
    if (r) return r == 1 ? 0 : r;
    int quick = la_args_flag(&a, "quick");
    const char *only = la_args_get(&a, "only");
    la_bench_cfg sel = {0};
    sel.ops = only;
    struct { const char *name; int (*fn)(FILE *, int); const char *title; } sections[] = {
        {"dense", la_demo_dense, "Softmax vs linear attention"},
        {"mhla", la_demo_mhla, "MHLA: multi-head linear attention over token blocks"},
        {"focused", la_demo_focused, "Focused linear attention and attention-map analysis"},
        {"sparse", la_demo_sparse, "Sparse attention: DSA and HISA indexers, sparse MLA"},
    };
    printf("longattn demo — %s\n", la_build_info());
    double t0 = la_now();
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (!la_bench_selected(&sel, sections[i].name)) continue;
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
    printf("\ndemo finished in %.1f s: %d section(s), %s\n", la_now() - t0, ran,
           failed ? "SOME CHECKS FAILED" : "all checks passed");
    return failed ? 1 : 0;
}
