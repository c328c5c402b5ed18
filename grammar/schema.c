#include "grammar/internal.h"
gm_status gm_grammar_from_json_schema(const char *json, size_t len, const gm_schema_options *opt, gm_grammar **out, gm_error *err) { (void)json; (void)len; (void)opt; *out = NULL; return gm_fail(err, GM_ERR_UNSUPPORTED, "todo"); }
