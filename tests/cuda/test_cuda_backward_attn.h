static void run_attn_tests(la_rng *r, la_context *ctx) { (void)r; (void)ctx; }
