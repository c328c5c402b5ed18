/* backends/vulkan/none.c — a build without Vulkan (no vulkan/vulkan.h or glslc at configure time: cmake
 * -DGM_VULKAN=OFF): the backend and the device list say so. */
#include "backends/vulkan/vulkan.h"
#include "core/error.h"

gm_status gm_backend_vulkan_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                                gm_backend **out, gm_error *err) {
    (void)m, (void)lay, (void)opt;
    *out = NULL;
    return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: this build has no Vulkan backend (configure with the Vulkan "
                   "headers and glslc present: scripts/install-deps.sh installs them; cmake -DGM_VULKAN=ON)");
}

const char *gm_backend_vulkan_device(const gm_backend *be) {
    (void)be;
    return "";
}

bool gm_backend_vulkan_built(void) { return false; }

gm_status gm_gpu_devices(gm_gpu_device *out, int cap, int *n, gm_error *err) {
    (void)out, (void)cap;
    if (n) *n = 0;
    return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: this build has no Vulkan backend (cmake -DGM_VULKAN=ON)");
}
