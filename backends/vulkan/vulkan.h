/* backends/vulkan/vulkan.h — the Vulkan backend's constructor (backend.c; none.c in a build without Vulkan). */
#ifndef GM_BACKENDS_VULKAN_VULKAN_H
#define GM_BACKENDS_VULKAN_VULKAN_H

#include "runtime/backend.h"

/* A backend on a Vulkan device (opt->device: 0 the first GPU, else the first usable device; N > 0 the (N-1)th
 * listed by gm_gpu_devices). Weights are uploaded now. m and lay must outlive it; text models only (m and lay
 * not NULL). GM_ERR_UNSUPPORTED, naming what is missing, without a loader, driver, device or feature. */
gm_status gm_backend_vulkan_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                                gm_backend **out, gm_error *err);
/* the device's name, for the user ("llvmpipe (LLVM 15.0.6, 256 bits)") */
const char *gm_backend_vulkan_device(const gm_backend *be);
/* true in a build with the backend */
bool gm_backend_vulkan_built(void);

#endif
