/* core/limits.h — the one set of size limits a model description must meet, checked in one place (model/config.c:
 * gm_config_check for the config, gm_config_check_layer for each layer's facts at open; the readers call
 * gm_config_check_layer_count before they size anything by the layer count). The kernels rely on them:
 * kernels/ops.c converts one F16 key row of up to GM_MAX_HEAD_DIM values on the stack. */
#ifndef GM_CORE_LIMITS_H
#define GM_CORE_LIMITS_H

enum {
    GM_MAX_LAYERS = 1024,
    GM_MAX_HEADS = 4096,
    GM_MAX_HEAD_DIM = 4096,
    GM_MAX_D_MODEL = 65536,
    GM_MAX_D_FF = 1 << 20,
    GM_MAX_DENSE_DIM = 1 << 20, /* an embedding model's projection sides (dense_2, dense_3) */
};

#endif
