/* model/limits.h — the one set of size limits a model description must meet, checked where a config is
 * read (model/config.c, gemma4.c, gemma4_hf.c) and again per layer at open (model/model.c). The kernels
 * rely on them: kernels/ops.c converts one F16 key row of up to GM_MAX_HEAD_DIM values on the stack. */
#ifndef GM_MODEL_LIMITS_H
#define GM_MODEL_LIMITS_H

enum {
    GM_MAX_LAYERS = 1024,
    GM_MAX_HEADS = 4096,
    GM_MAX_HEAD_DIM = 4096,
    GM_MAX_D_MODEL = 65536,
    GM_MAX_D_FF = 1 << 20,
};

#endif
