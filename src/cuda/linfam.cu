/* The linear-family engine's entry point: picks the tensor-core path
 * (linfam_tc.cu) or the portable fp32 engine (linfam_portable.cu) for a
 * problem (lf_select), reports the choice, runs it. */
#include "linfam_engine.cuh"
#include "select.cuh"

namespace {

/* fp16 inputs on the tensor-core path `tc` (fp16 products, fp32 partials,
 * S̃ and z̃ scaled into fp16's range per block, fp32 sums; linfam_tc.cu);
 * false sends them to the portable fp32 engine. (It was off once: the fp16 output pass left the per-query
 * denominators unwritten for the relu maps at scale 1, the operators'
 * defaults; the harness's N = 256K check found it, dev/emu_mhla_fwd.sh has
 * the cases now.) On since the device harness (tests/backend/cases_f16tc.c and
 * the f16 rows of cases_linear.c) passed with the fixed kernels; false sends
 * fp16 back to the portable engine. */
constexpr bool lf_f16_tc = true;

bool lf_view_fast(const la_cu_view &x, int dt) {
    return x.dt == dt && (dt == LA_BF16 || (dt == LA_F16 && lf_f16_tc)) && x.nb[3] == 1 &&
           x.nb[0] % 8 == 0 && x.nb[1] % 8 == 0 && x.nb[2] % 8 == 0 && ((uintptr_t)x.data % 16) == 0;
}

/* fp16 inputs on variant tc_bf16s too (16-bit summaries in fp16 under
 * powers of two, linfam_tc_bf16s.cu), when lf_f16_tc; false: fp16 takes tc
 * (fp32 partials and the tf32 mix) */
constexpr bool lf_f16_s16 = true;

const char *const lf_names[] = {"tc", "portable", "tc_bf16s"};
/* whether the default takes tc_bf16s where it applies (else tc) */
constexpr bool lf_bf16s_default = true;

int64_t lf_blocks(const lf_problem *P) {
    return P->chunk > 0 ? la_cu_cdiv(P->N, P->chunk) : P->g[0] * P->g[1] * P->g[2];
}

/* Why the tensor-core path does not take P (NULL: it does): the first
 * condition that fails, for the verbose report. */
const char *lf_tc_why(const lf_problem *P, int64_t maxcnt) {
    if (P->chunk != 0) /* linear.cu asked linear_causal's tensor-core path first */
        return P->use_w ? "causal MHLA (not written yet)"
                        : "causal: bf16 rows with unit inner stride, D = Dv in {32, 64, 128}, B*H <= 65535";
    if (!lf_tc_dims(P->D, P->Dv)) return "head dims: D = Dv in {32, 64, 128} or (64, 128), (128, 64)";
    if (P->conv.data || P->fq.kind == LF_FEAT_FLATTEN || P->fk.kind == LF_FEAT_FLATTEN)
        return "flatten features or conv fused";
    const int dt = P->q.dt;
    if (!lf_view_fast(P->q, dt) || !lf_view_fast(P->k, dt) || !lf_view_fast(P->v, dt) ||
        !lf_view_fast(P->out, dt))
        return lf_f16_tc ? "not bf16 or fp16 rows (one dtype) with unit inner stride, 16-B aligned"
                         : "not bf16 rows with unit inner stride, 16-B aligned";
    if (maxcnt >= INT32_MAX) return "block of 2^31 tokens or more";
    return nullptr;
}

}  // namespace

la_status lf_select(const lf_problem *P, int64_t maxcnt, const char *family, const char *forced,
                    lf_kernel *kern) {
    /* tensor-core path: non-causal, head dims of lf_tc_dims, bf16 or fp16 rows, no fused conv */
    const bool tc = lf_tc_why(P, maxcnt) == nullptr;
    /* fp16: tc_bf16s while lf_f16_s16 */
    const bool dt16 = P->q.dt == LA_BF16 || (P->q.dt == LA_F16 && lf_f16_s16);
    const bool b16 = tc && dt16 && lf_tc_bf16s_why(P, lf_blocks(P)) == nullptr;
    if (!forced) {
        *kern = !tc ? LF_PORTABLE : b16 && lf_bf16s_default ? LF_TC_BF16S : LF_TC;
        return LA_OK;
    }
    const int i = la_cu_variant_index(forced, lf_names, 3);
    if (i < 0) return la_cu_unknown_variant(family, forced, "tc, portable, tc_bf16s");
    if ((i == LF_TC || i == LF_TC_BF16S) && !tc)
        return la_cu_variant_unsupported(family, forced,
                                         "non-causal, bf16 or fp16, D = Dv in {32, 64, 128} or (D, Dv) = (64, 128), "
                                         "(128, 64), rows contiguous");
    if (i == LF_TC_BF16S && !b16)
        return la_cu_variant_unsupported(family, forced,
                                         !dt16 ? "bf16 inputs (fp16: switched off)"
                                               : lf_tc_bf16s_why(P, lf_blocks(P)));
    *kern = (lf_kernel)i;
    return LA_OK;
}

la_status lf_run(const lf_problem *P, const la_context *ctx, const char *family,
                 const char *forced, cudaStream_t st) {
    lf_args a = lf_args_of(P);
    lf_kernel kern;
    LA_TRY(lf_select(P, a.maxcnt, family, forced, &kern));
    const char *why = kern == LF_PORTABLE && !forced ? lf_tc_why(P, a.maxcnt) : nullptr;
    /* an MHLA problem the bf16-summary variant does not take: say why */
    const char *why16 = kern == LF_TC && !forced && lf_bf16s_default && P->use_w
                            ? (P->q.dt == LA_F16 && !lf_f16_s16 ? "fp16 inputs" : lf_tc_bf16s_why(P, a.M))
                            : nullptr;
    la_cu_report(ctx, family, lf_names[kern], "B=%lld N=%lld H=%lld D=%lld Dv=%lld M=%lld causal=%d%s%s%s%s",
                 (long long)P->B, (long long)P->N, (long long)P->H, (long long)P->D,
                 (long long)P->Dv, (long long)a.M, P->chunk > 0, why ? "; no tensor-core path: " : "",
                 why ? why : "", why16 ? "; not tc_bf16s: " : "", why16 ? why16 : "");
    if (kern == LF_TC_BF16S) return lf_run_tc_bf16s(a, st);
    return kern == LF_TC ? lf_run_tc(a, st) : lf_run_portable(a, st);
}
