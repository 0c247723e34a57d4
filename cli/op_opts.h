/* The input options of each operator, shared by its forward (`longattn run
 * OP`) and its backward (`longattn run OP --backward`) option tables, so
 * that the two modes take the same names with the same defaults and help. */
#ifndef LA_CLI_OP_OPTS_H
#define LA_CLI_OP_OPTS_H

#define CLI_SOFTMAX_INPUT_OPTS                                                                   \
    {"q", CLI_OPT_IN, NULL, "queries .npy [B,Nq,H,D]"},                                          \
    {"k", CLI_OPT_IN, NULL, "keys .npy [B,Nk,Hk,D] (H % Hk == 0: grouped-query attention)"},     \
    {"v", CLI_OPT_IN, NULL, "values .npy [B,Nk,Hk,Dv]"},                                         \
    {"causal", CLI_OPT_FLAG, "off",                                                              \
     "causal mask, bottom-right aligned: query i sees keys s <= i + Nk - Nq"},                   \
    {"scale", CLI_OPT_VALUE, NULL, "score scale (default: D^-1/2; 0 also means the default)"}

#define CLI_LINEAR_INPUT_OPTS                                                                    \
    {"q", CLI_OPT_IN, NULL, "queries .npy [B,N,H,D]"},                                           \
    {"k", CLI_OPT_IN, NULL, "keys .npy [B,N,H,D]"},                                              \
    {"v", CLI_OPT_IN, NULL, "values .npy [B,N,H,Dv]"},                                           \
    {"feature", CLI_OPT_VALUE, "relu", "feature map phi: identity|relu|relu_eps|relu1|elu1"},    \
    {"causal", CLI_OPT_FLAG, "off", "causal: sums over j <= t (chunkwise form)"},                \
    {"normalize", CLI_OPT_FLAG, "on", "divide by q~ . z + eps"},                                 \
    {"eps", CLI_OPT_VALUE, "1e-6", "denominator epsilon (>= 0)"},                                \
    {"scale", CLI_OPT_VALUE, "1", "query scale scale_q: q~ = scale * phi(q)"},                   \
    {"chunk", CLI_OPT_VALUE, "64",                                                               \
     "--causal: chunk size C (1..4096); the result does not depend on it"},                      \
    {"state-in", CLI_OPT_VALUE, NULL,                                                            \
     "--causal: read the recurrent state from PREFIX.S.npy [B,H,D,Dv] and PREFIX.z.npy [B,H,D]"}

#define CLI_MHLA_INPUT_OPTS                                                                      \
    {"q", CLI_OPT_IN, NULL, "queries .npy [B,N,H,D]"},                                           \
    {"k", CLI_OPT_IN, NULL, "keys .npy [B,N,H,D]"},                                              \
    {"v", CLI_OPT_IN, NULL, "values .npy [B,N,H,Dv]"},                                           \
    {"mixing", CLI_OPT_IN, NULL, "mixing matrix .npy [M,M] (shared) or [H,M,M] (per head)"},     \
    {"causal", CLI_OPT_FLAG, "off",                                                              \
     "causal chunkwise MHLA over 1-D chunks of --chunk tokens (SPEC §5.4)"},                     \
    {"grid", CLI_OPT_VALUE, NULL,                                                                \
     "non-causal: token grid N, HxW or TxHxW in raster order (default: N, 1-D)"},                \
    {"blocks", CLI_OPT_VALUE, NULL,                                                              \
     "non-causal: block grid, same rank as --grid, e.g. 4x4 (default for a 1-D grid: M of "      \
     "--mixing)"},                                                                               \
    {"feature", CLI_OPT_VALUE, NULL,                                                             \
     "feature map identity|relu|relu_eps|relu1|elu1 (default: relu_eps; relu with --causal)"},   \
    {"normalize", CLI_OPT_VALUE, NULL,                                                           \
     "per_query|none|released_vision (default: per_query; none with --causal, which allows "     \
     "per_query|none)"},                                                                         \
    {"eps", CLI_OPT_VALUE, "1e-6", "denominator epsilon"},                                       \
    {"scale", CLI_OPT_VALUE, NULL,                                                               \
     "query scale scale_q, q~ = scale*phi(q) (default: 1; D^-1/2 with --causal)"},               \
    {"chunk", CLI_OPT_VALUE, "64",                                                               \
     "--causal: chunk (block) size C; mixing must be at least ceil(N/C) square"}

#define CLI_FOCUSED_INPUT_OPTS                                                                   \
    {"q", CLI_OPT_IN, NULL, "queries .npy [B,N,H,D]"},                                           \
    {"k", CLI_OPT_IN, NULL, "keys .npy [B,N,H,D]"},                                              \
    {"v", CLI_OPT_IN, NULL, "values .npy [B,N,H,Dv] (Dv = D when the flatten conv is given)"},   \
    {"variant", CLI_OPT_VALUE, "flatten",                                                        \
     "flatten (the published FLatten module) or blog (the seed blog's variant)"},                \
    {"map", CLI_OPT_VALUE, NULL, "token map HxW, H*W = N (required)"},                           \
    {"conv", CLI_OPT_IN, NULL,                                                                   \
     "depthwise kernel .npy, odd k: flatten [D,k,k] on v, shared by heads; blog [H*D,k,k] on "   \
     "phi(K) (also [.,1,k,k]); default: flatten none, blog identity"},                           \
    {"conv-bias", CLI_OPT_IN, NULL, "flatten: conv bias .npy [D] (default: none)"},              \
    {"softplus-param", CLI_OPT_IN, NULL,                                                         \
     "flatten: scale parameter s .npy [H*D], x' = (ReLU(x)+1e-6)/softplus(s) (default: zeros)"}, \
    {"p", CLI_OPT_VALUE, "3", "flatten: focusing factor"},                                       \
    {"focus", CLI_OPT_VALUE, "2.0",                                                              \
     "blog: per-head coefficient .npy [H], or one number for all heads (it cancels, see "        \
     "docs/FOCUSED.md)"},                                                                         \
    {"eps", CLI_OPT_VALUE, "1e-6", "normalizer epsilon (flatten: beside the mean)"}

#define CLI_SPARSE_ATTN_INPUT_OPTS                                                               \
    {"q", CLI_OPT_IN, NULL, "queries .npy [T,Hq,Dqk]"},                                          \
    {"kv", CLI_OPT_IN, NULL,                                                                     \
     "latent entries .npy [L,Dqk] (MQA, shared by all heads) or [L,Hkv,Dqk] (head h reads kv "   \
     "head h*Hkv/Hq)"},                                                                          \
    {"idx", CLI_OPT_IN, NULL,                                                                    \
     "int32 .npy [T,k]: selected keys per query (any negative value, or >= L: skipped like -1)"}, \
    {"dv", CLI_OPT_VALUE, "512",                                                                 \
     "value width: values are the first dv columns of kv (dv <= Dqk)"},                          \
    {"scale", CLI_OPT_VALUE, NULL, "score scale (default: Dqk^-1/2; 0 also means the default)"}

#endif
