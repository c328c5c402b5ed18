/* backends/vulkan/device.c — the Vulkan device under the backend (see device.h). */
#define VK_NO_PROTOTYPES
#include "backends/vulkan/device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "core/error.h"
#include "backends/vulkan/spirv.h" /* generated: the shaders' SPIR-V (gm_vk_spirv[], gm_vk_spirv_size[]) */

/* ---------------------------------------------------------------- the loader's functions */

#define GM_VK_INSTANCE_FNS(X)                                                                                      \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                          \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceMemoryProperties)      \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define GM_VK_DEVICE_FNS(X)                                                                                        \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)  \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkGetBufferDeviceAddress)          \
    X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)         \
    X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateCommandPool) X(vkDestroyCommandPool)               \
    X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer)             \
    X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer)        \
    X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences) X(vkDeviceWaitIdle)

typedef struct vk_fns {
    void *lib;
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkCreateInstance vkCreateInstance;
    PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties;
    PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT;
    PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
#define X(f) PFN_##f f;
    GM_VK_INSTANCE_FNS(X) GM_VK_DEVICE_FNS(X)
#undef X
} vk_fns;

/* one buffer: its address range, and its mapping when host-visible */
typedef struct vk_buf {
    uint64_t addr;
    size_t size;
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
} vk_buf;

/* one logged op (gm_vk_dispatch, gm_vk_copy, gm_vk_read): compared as bytes, so always zeroed before filling */
enum { VK_OP_DISPATCH, VK_OP_COPY, VK_OP_COPY_TO_HOST };
typedef struct vk_op {
    int kind, pipe;
    uint32_t push_bytes, g[3];
    uint8_t push[128];
    VkBuffer src, dst;
    VkDeviceSize src_off, dst_off, bytes;
} vk_op;

/* a recorded command buffer and the log it was recorded from */
enum { GM_VK_RECORDED = 16 };
typedef struct vk_recorded {
    VkCommandBuffer cmd;
    vk_op *log;
    int n;
    uint64_t hash, used;
} vk_recorded;

struct gm_vk {
    vk_fns f;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceMemoryProperties memp;
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    VkPipelineLayout layout;
    VkPipeline pipes[GM_VK_PIPES];
    VkCommandPool cpool;
    VkFence fence;
    vk_op *log; /* what is to be submitted */
    int n_log, cap_log;
    vk_recorded rec[GM_VK_RECORDED]; /* recorded command buffers, least recently used replaced */
    uint64_t tick;
    vk_buf *bufs; /* sorted by address */
    int n_bufs, cap_bufs;
    uint64_t arena;       /* the upload arena (host-visible) */
    size_t arena_size, arena_used;
    uint8_t *arena_map;
    uint64_t staging;     /* host-visible: reads, and uploads to memory the host cannot map */
    size_t staging_size;
    gm_backend_stats stats;
    int64_t validation_errors; /* errors the validation layer reported (on_validation) */
    bool device_fns;   /* every device function loaded (what gm_vk_close may call) */
    gm_status sticky;  /* an op that could not be recorded (out of arena memory), a device or validation error:
                        * every later flush returns it, so the engine's next call fails instead of computing wrong */
};

/* ---------------------------------------------------------------- instance and device */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                    VkDebugUtilsMessageTypeFlagsEXT type,
                                                    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type;
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        ((gm_vk *)user)->validation_errors++;
        fprintf(stderr, "vulkan validation: %s\n", data->pMessage);
    }
    return VK_FALSE;
}

static gm_status load_loader(vk_fns *f, gm_error *err) {
    f->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!f->lib) f->lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!f->lib)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: no Vulkan loader (libvulkan.so.1: install libvulkan1 and a "
                       "driver, e.g. Debian's mesa-vulkan-drivers)");
    f->vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(f->lib, "vkGetInstanceProcAddr");
    if (!f->vkGetInstanceProcAddr) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the loader has no vkGetInstanceProcAddr");
    f->vkCreateInstance = (PFN_vkCreateInstance)f->vkGetInstanceProcAddr(NULL, "vkCreateInstance");
    f->vkEnumerateInstanceLayerProperties =
        (PFN_vkEnumerateInstanceLayerProperties)f->vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceLayerProperties");
    if (!f->vkCreateInstance || !f->vkEnumerateInstanceLayerProperties)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the loader lacks vkCreateInstance");
    return GM_OK;
}

static bool has_validation_layer(vk_fns *f) {
    uint32_t n = 0;
    if (f->vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n) return false;
    VkLayerProperties *l = calloc(n, sizeof *l);
    bool found = false;
    if (l && f->vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= !strcmp(l[i].layerName, "VK_LAYER_KHRONOS_validation");
    free(l);
    return found;
}

static gm_status create_instance(gm_vk *vk, bool validate, gm_error *err) {
    vk_fns *f = &vk->f;
    const char *layer = "VK_LAYER_KHRONOS_validation", *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    if (validate && !has_validation_layer(f))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: validation asked, but VK_LAYER_KHRONOS_validation is not "
                       "installed (Debian: vulkan-validationlayers)");
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "gemma.c",
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                     .enabledLayerCount = validate, .ppEnabledLayerNames = &layer,
                                     .enabledExtensionCount = validate, .ppEnabledExtensionNames = &ext};
    VkResult r = f->vkCreateInstance(&ci, NULL, &vk->inst);
    if (r != VK_SUCCESS)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot create an instance (VkResult %d): no driver?", (int)r);
#define X(fn) f->fn = (PFN_##fn)f->vkGetInstanceProcAddr(vk->inst, #fn);
    GM_VK_INSTANCE_FNS(X)
#undef X
#define X(fn) if (!f->fn) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the driver lacks %s (Vulkan 1.2 needed)", #fn);
    GM_VK_INSTANCE_FNS(X)
#undef X
    if (validate) {
        f->vkCreateDebugUtilsMessengerEXT =
            (PFN_vkCreateDebugUtilsMessengerEXT)f->vkGetInstanceProcAddr(vk->inst, "vkCreateDebugUtilsMessengerEXT");
        f->vkDestroyDebugUtilsMessengerEXT =
            (PFN_vkDestroyDebugUtilsMessengerEXT)f->vkGetInstanceProcAddr(vk->inst, "vkDestroyDebugUtilsMessengerEXT");
        const VkDebugUtilsMessengerCreateInfoEXT mi = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = on_validation, .pUserData = vk};
        if (!f->vkCreateDebugUtilsMessengerEXT ||
            f->vkCreateDebugUtilsMessengerEXT(vk->inst, &mi, NULL, &vk->messenger) != VK_SUCCESS)
            return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot install the validation messenger");
    }
    return GM_OK;
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* What the shaders need of a device; NULL when it has it all, else the first thing missing. */
static const char *missing_feature(const vk_fns *f, VkPhysicalDevice p) {
    VkPhysicalDeviceProperties pr;
    f->vkGetPhysicalDeviceProperties(p, &pr);
    if (VK_API_VERSION_MINOR(pr.apiVersion) < 2 && VK_API_VERSION_MAJOR(pr.apiVersion) == 1) return "Vulkan 1.2";
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    f->vkGetPhysicalDeviceFeatures2(p, &f2);
    if (!f12.bufferDeviceAddress) return "bufferDeviceAddress";
    if (!f2.features.shaderInt64) return "shaderInt64";
    if (!f11.storageBuffer16BitAccess) return "storageBuffer16BitAccess";
    if (!f2.features.shaderInt16) return "shaderInt16";
    return NULL;
}

static void describe(const vk_fns *f, VkPhysicalDevice p, gm_gpu_device *d) {
    VkPhysicalDeviceProperties pr;
    f->vkGetPhysicalDeviceProperties(p, &pr);
    VkPhysicalDeviceMemoryProperties mp;
    f->vkGetPhysicalDeviceMemoryProperties(p, &mp);
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    f->vkGetPhysicalDeviceProperties2(p, &p2);
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", pr.deviceName);
    snprintf(d->type, sizeof d->type, "%s", type_name(pr.deviceType));
    snprintf(d->api, sizeof d->api, "%u.%u.%u", VK_API_VERSION_MAJOR(pr.apiVersion), VK_API_VERSION_MINOR(pr.apiVersion),
             VK_API_VERSION_PATCH(pr.apiVersion));
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d->memory_bytes += mp.memoryHeaps[i].size;
    d->max_alloc_bytes = m3.maxMemoryAllocationSize;
    d->max_storage_range = pr.limits.maxStorageBufferRange;
    d->shared_memory = pr.limits.maxComputeSharedMemorySize;
    d->subgroup = sg.subgroupSize;
    d->gpu = pr.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU || pr.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
             pr.deviceType == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU;
    const char *miss = missing_feature(f, p);
    d->usable = !miss;
    if (miss) snprintf(d->missing, sizeof d->missing, "%s", miss);
}

/* the physical devices (up to 16) */
static uint32_t list_physical(gm_vk *vk, VkPhysicalDevice *out) {
    uint32_t n = 16;
    if (vk->f.vkEnumeratePhysicalDevices(vk->inst, &n, out) < 0) return 0;
    return n;
}

static int find_memory(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits, VkMemoryPropertyFlags want,
                       VkMemoryPropertyFlags nice) {
    int best = -1;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        const VkMemoryPropertyFlags fl = mp->memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (fl & want) != want) continue;
        if (best < 0 || ((fl & nice) == nice && (mp->memoryTypes[best].propertyFlags & nice) != nice)) best = (int)i;
    }
    return best;
}

static gm_status create_device(gm_vk *vk, gm_error *err) {
    vk_fns *f = &vk->f;
    uint32_t nq = 0;
    f->vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, NULL);
    VkQueueFamilyProperties qp[16];
    if (nq > 16) nq = 16;
    f->vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, qp);
    vk->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && vk->queue_family == UINT32_MAX; i++)
        if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) vk->queue_family = i;
    if (vk->queue_family == UINT32_MAX) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", vk->name);
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                        .queueFamilyIndex = vk->queue_family, .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .bufferDeviceAddress = VK_TRUE};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12, .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11,
                                    .features = {.shaderInt64 = VK_TRUE, .shaderInt16 = VK_TRUE}};
    const VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2, .queueCreateInfoCount = 1,
                                   .pQueueCreateInfos = &qi};
    VkResult r = f->vkCreateDevice(vk->phys, &ci, NULL, &vk->dev);
    if (r != VK_SUCCESS) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot create a device on %s (VkResult %d)", vk->name, (int)r);
#define X(fn) f->fn = (PFN_##fn)f->vkGetDeviceProcAddr(vk->dev, #fn);
    GM_VK_DEVICE_FNS(X)
#undef X
#define X(fn) if (!f->fn) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the driver lacks %s", #fn);
    GM_VK_DEVICE_FNS(X)
#undef X
    vk->device_fns = true;
    f->vkGetDeviceQueue(vk->dev, vk->queue_family, 0, &vk->queue);
    f->vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->memp);
    return GM_OK;
}

static gm_status create_pipelines(gm_vk *vk, gm_error *err) {
    vk_fns *f = &vk->f;
    const VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 128};
    const VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                           .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    if (f->vkCreatePipelineLayout(vk->dev, &li, NULL, &vk->layout) != VK_SUCCESS)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot create the pipeline layout");
    for (int p = 0; p < GM_VK_PIPES; p++) {
        const VkShaderModuleCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                             .codeSize = gm_vk_spirv_size[p], .pCode = gm_vk_spirv[p]};
        VkShaderModule mod;
        if (f->vkCreateShaderModule(vk->dev, &si, NULL, &mod) != VK_SUCCESS)
            return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot load shader %s", gm_vk_spirv_name[p]);
        const VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = mod, .pName = "main"},
            .layout = vk->layout};
        VkResult r = f->vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &ci, NULL, &vk->pipes[p]);
        f->vkDestroyShaderModule(vk->dev, mod, NULL);
        if (r != VK_SUCCESS)
            return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot compile shader %s (VkResult %d)", gm_vk_spirv_name[p], (int)r);
    }
    return GM_OK;
}

static gm_status create_stream(gm_vk *vk, gm_error *err) {
    vk_fns *f = &vk->f;
    const VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                        .queueFamilyIndex = vk->queue_family};
    const VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (f->vkCreateCommandPool(vk->dev, &pi, NULL, &vk->cpool) != VK_SUCCESS ||
        f->vkCreateFence(vk->dev, &fi, NULL, &vk->fence) != VK_SUCCESS)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: cannot create a command pool");
    vk->arena_size = (size_t)8 << 20;
    vk->arena = gm_vk_buffer(vk, vk->arena_size, true);
    vk->staging_size = (size_t)16 << 20;
    vk->staging = gm_vk_buffer(vk, vk->staging_size, true);
    if (!vk->arena || !vk->staging) return gm_fail(err, GM_ERR_NOMEM, "vulkan: cannot allocate the upload buffers");
    vk->arena_map = gm_vk_map(vk, vk->arena);
    return GM_OK;
}

/* the device of index `want` (< 0: the first GPU, else unless gpu_only the first usable device) */
static gm_status pick_device(gm_vk *vk, int want, bool gpu_only, gm_error *err) {
    VkPhysicalDevice ph[16];
    const uint32_t n = list_physical(vk, ph);
    if (!n) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the loader found no device (install a driver: "
                           "mesa-vulkan-drivers for lavapipe, or the GPU vendor's)");
    if (want >= (int)n) return gm_fail(err, GM_ERR_ARG, "vulkan: no device %d (%u found: gemma inspect --devices)", want, n);
    int pick = want;
    gm_gpu_device d;
    for (uint32_t i = 0; pick < 0 && i < n; i++) {
        describe(&vk->f, ph[i], &d);
        if (d.usable && d.gpu) pick = (int)i;
    }
    if (pick < 0 && gpu_only) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: no GPU can run the backend");
    for (uint32_t i = 0; pick < 0 && i < n; i++) {
        describe(&vk->f, ph[i], &d);
        if (d.usable) pick = (int)i;
    }
    if (pick < 0) pick = 0;
    describe(&vk->f, ph[pick], &d);
    if (!d.usable) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: device %d (%s) lacks %s", pick, d.name, d.missing);
    vk->phys = ph[pick];
    snprintf(vk->name, sizeof vk->name, "%s", d.name);
    return GM_OK;
}

gm_status gm_vk_open(const gm_vk_options *o, gm_vk **out, gm_error *err) {
    *out = NULL;
    gm_vk *vk = calloc(1, sizeof *vk);
    if (!vk) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
    gm_status st = load_loader(&vk->f, err);
    if (!st) st = create_instance(vk, o->validate, err);
    if (!st) st = pick_device(vk, o->device, o->gpu_only, err);
    if (!st) st = create_device(vk, err);
    if (!st) st = create_pipelines(vk, err);
    if (!st) st = create_stream(vk, err);
    if (st) {
        gm_vk_close(vk);
        return st;
    }
    *out = vk;
    return GM_OK;
}

void gm_vk_close(gm_vk *vk) {
    if (!vk) return;
    vk_fns *f = &vk->f;
    if (vk->dev && !vk->device_fns) {
        if (f->vkDestroyDevice) f->vkDestroyDevice(vk->dev, NULL);
    } else if (vk->dev) {
        f->vkDeviceWaitIdle(vk->dev);
        while (vk->n_bufs) gm_vk_buffer_free(vk, vk->bufs[vk->n_bufs - 1].addr);
        for (int p = 0; p < GM_VK_PIPES; p++)
            if (vk->pipes[p]) f->vkDestroyPipeline(vk->dev, vk->pipes[p], NULL);
        if (vk->layout) f->vkDestroyPipelineLayout(vk->dev, vk->layout, NULL);
        if (vk->fence) f->vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->cpool) f->vkDestroyCommandPool(vk->dev, vk->cpool, NULL);
        f->vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->messenger) f->vkDestroyDebugUtilsMessengerEXT(vk->inst, vk->messenger, NULL);
    if (vk->inst) f->vkDestroyInstance(vk->inst, NULL);
    /* The loader stays loaded for the process's life (dlopen counts references: the next open gets the same one),
     * as applications commonly keep it: unloading it mid-process buys nothing and drivers are not written for it. */
    for (int i = 0; i < GM_VK_RECORDED; i++) free(vk->rec[i].log);
    free(vk->log);
    free(vk->bufs);
    free(vk);
}

const char *gm_vk_device_name(const gm_vk *vk) { return vk ? vk->name : ""; }

/* ---------------------------------------------------------------- the device list (gemma inspect --devices) */

gm_status gm_gpu_devices(gm_gpu_device *out, int cap, int *n, gm_error *err) {
    if (n) *n = 0;
    if (!n || cap < 0 || (cap && !out)) return gm_fail(err, GM_ERR_ARG, "gm_gpu_devices: bad arguments");
    gm_vk *vk = calloc(1, sizeof *vk);
    if (!vk) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
    gm_status st = load_loader(&vk->f, err);
    if (!st) st = create_instance(vk, false, err);
    if (!st) {
        VkPhysicalDevice ph[16];
        const uint32_t np = list_physical(vk, ph);
        for (uint32_t i = 0; i < np && (int)i < cap; i++) describe(&vk->f, ph[i], &out[i]);
        *n = (int)np;
    }
    gm_vk_close(vk);
    return st;
}

/* ---------------------------------------------------------------- buffers */

static vk_buf *find_buf(gm_vk *vk, uint64_t addr) {
    int lo = 0, hi = vk->n_bufs - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        vk_buf *b = &vk->bufs[mid];
        if (addr < b->addr) hi = mid - 1;
        else if (addr >= b->addr + b->size) lo = mid + 1;
        else return b;
    }
    return NULL;
}

uint64_t gm_vk_buffer(gm_vk *vk, size_t bytes, bool host_visible) {
    vk_fns *f = &vk->f;
    if (vk->n_bufs == vk->cap_bufs) {
        const int cap = vk->cap_bufs ? 2 * vk->cap_bufs : 64;
        vk_buf *nb = realloc(vk->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return 0;
        vk->bufs = nb, vk->cap_bufs = cap;
    }
    vk_buf b = {.size = bytes ? bytes : 4};
    const VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = b.size,
                                   .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                            VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                                   .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (f->vkCreateBuffer(vk->dev, &bi, NULL, &b.buf) != VK_SUCCESS) return 0;
    VkMemoryRequirements req;
    f->vkGetBufferMemoryRequirements(vk->dev, b.buf, &req);
    const VkMemoryPropertyFlags want = host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                                    : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags nice = host_visible ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0;
    int type = find_memory(&vk->memp, req.memoryTypeBits, want, nice);
    if (type < 0 && !host_visible) type = find_memory(&vk->memp, req.memoryTypeBits, 0, 0);
    if (type < 0) {
        f->vkDestroyBuffer(vk->dev, b.buf, NULL);
        return 0;
    }
    const VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                          .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &fl,
                                     .allocationSize = req.size, .memoryTypeIndex = (uint32_t)type};
    if (f->vkAllocateMemory(vk->dev, &ai, NULL, &b.mem) != VK_SUCCESS) {
        f->vkDestroyBuffer(vk->dev, b.buf, NULL);
        return 0;
    }
    const bool mappable = vk->memp.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    if (f->vkBindBufferMemory(vk->dev, b.buf, b.mem, 0) != VK_SUCCESS ||
        (mappable && f->vkMapMemory(vk->dev, b.mem, 0, VK_WHOLE_SIZE, 0, &b.map) != VK_SUCCESS)) {
        f->vkDestroyBuffer(vk->dev, b.buf, NULL);
        f->vkFreeMemory(vk->dev, b.mem, NULL);
        return 0;
    }
    const VkBufferDeviceAddressInfo di = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b.buf};
    b.addr = f->vkGetBufferDeviceAddress(vk->dev, &di);
    int at = vk->n_bufs;
    while (at > 0 && vk->bufs[at - 1].addr > b.addr) at--;
    memmove(&vk->bufs[at + 1], &vk->bufs[at], (size_t)(vk->n_bufs - at) * sizeof *vk->bufs);
    vk->bufs[at] = b;
    vk->n_bufs++;
    return b.addr;
}

void gm_vk_buffer_free(gm_vk *vk, uint64_t addr) {
    vk_buf *b = find_buf(vk, addr);
    if (!b) return;
    if (vk->n_log) gm_vk_flush(vk); /* a logged op may still read it */
    for (int i = 0; i < GM_VK_RECORDED; i++) /* recordings naming it must not be replayed */
        for (int k = 0; k < vk->rec[i].n; k++)
            if (vk->rec[i].log[k].src == b->buf || vk->rec[i].log[k].dst == b->buf) {
                vk->rec[i].n = 0, vk->rec[i].hash = 0;
                break;
            }
    vk->f.vkDestroyBuffer(vk->dev, b->buf, NULL);
    vk->f.vkFreeMemory(vk->dev, b->mem, NULL);
    const int at = (int)(b - vk->bufs);
    memmove(&vk->bufs[at], &vk->bufs[at + 1], (size_t)(vk->n_bufs - at - 1) * sizeof *vk->bufs);
    vk->n_bufs--;
}

void *gm_vk_map(gm_vk *vk, uint64_t addr) {
    vk_buf *b = find_buf(vk, addr);
    return b && b->map ? (uint8_t *)b->map + (addr - b->addr) : NULL;
}

gm_status gm_vk_upload(gm_vk *vk, uint64_t dst, const void *src, size_t bytes) {
    void *m = gm_vk_map(vk, dst);
    if (m) {
        memcpy(m, src, bytes);
        return GM_OK;
    }
    gm_status st = gm_vk_flush(vk); /* the staging buffer is free once nothing is pending */
    uint8_t *s = gm_vk_map(vk, vk->staging);
    for (size_t off = 0; !st && off < bytes; off += vk->staging_size) {
        const size_t n = bytes - off < vk->staging_size ? bytes - off : vk->staging_size;
        memcpy(s, (const uint8_t *)src + off, n);
        gm_vk_copy(vk, dst + off, vk->staging, n);
        st = gm_vk_flush(vk);
    }
    return st;
}

/* ---------------------------------------------------------------- the stream */

/* The log of what is to be submitted: ops are logged, not recorded, so that a submission whose log equals one
 * recorded before replays that command buffer (each decode step of the same shape logs the same ops with the same
 * arguments: the per-step data lives in the arena, at the same addresses, not in the commands). */
static bool log_op(gm_vk *vk, const vk_op *op) {
    if (vk->n_log == vk->cap_log) {
        const int cap = vk->cap_log ? 2 * vk->cap_log : 1024;
        vk_op *nl = realloc(vk->log, (size_t)cap * sizeof *nl);
        if (!nl) {
            gm_vk_fail(vk, GM_ERR_NOMEM);
            return false;
        }
        vk->log = nl, vk->cap_log = cap;
    }
    vk->log[vk->n_log++] = *op;
    return true;
}

/* the logged ops into cmd, a barrier after each (every op reads what the ones before wrote) */
static void record(gm_vk *vk, VkCommandBuffer cmd, const vk_op *log, int n) {
    vk_fns *f = &vk->f;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    f->vkBeginCommandBuffer(cmd, &bi);
    for (int i = 0; i < n; i++) {
        const vk_op *op = &log[i];
        if (op->kind == VK_OP_DISPATCH) {
            f->vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->pipes[op->pipe]);
            f->vkCmdPushConstants(cmd, vk->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, op->push_bytes, op->push);
            f->vkCmdDispatch(cmd, op->g[0], op->g[1], op->g[2]);
        } else {
            const VkBufferCopy c = {.srcOffset = op->src_off, .dstOffset = op->dst_off, .size = op->bytes};
            f->vkCmdCopyBuffer(cmd, op->src, op->dst, 1, &c);
        }
        const bool to_host = op->kind == VK_OP_COPY_TO_HOST;
        const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                    .dstAccessMask = to_host ? VK_ACCESS_HOST_READ_BIT
                                                             : VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                                   VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
        f->vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                to_host ? VK_PIPELINE_STAGE_HOST_BIT
                                        : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                0, 1, &mb, 0, NULL, 0, NULL);
    }
    f->vkEndCommandBuffer(cmd);
}

static uint64_t log_hash(const vk_op *log, int n) {
    const uint8_t *p = (const uint8_t *)log;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < (size_t)n * sizeof *log; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The command buffer for the current log: a cached one with the same log (a replay), else the least recently used
 * slot re-recorded. NULL when no command buffer can be had. */
static VkCommandBuffer command_buffer_for_log(gm_vk *vk) {
    const uint64_t h = log_hash(vk->log, vk->n_log);
    vk_recorded *lru = NULL;
    vk->tick++;
    for (int i = 0; i < GM_VK_RECORDED; i++) {
        vk_recorded *r = &vk->rec[i];
        if (r->cmd && r->hash == h && r->n == vk->n_log && !memcmp(r->log, vk->log, (size_t)r->n * sizeof *r->log)) {
            r->used = vk->tick;
            vk->stats.replays++;
            return r->cmd;
        }
        if (!lru || r->used < lru->used) lru = r;
    }
    if (!lru->cmd) {
        const VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                                .commandPool = vk->cpool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                                .commandBufferCount = 1};
        if (vk->f.vkAllocateCommandBuffers(vk->dev, &ai, &lru->cmd) != VK_SUCCESS) return NULL;
    } else {
        vk->f.vkResetCommandBuffer(lru->cmd, 0);
    }
    vk_op *copy = realloc(lru->log, (size_t)vk->n_log * sizeof *copy);
    if (!copy) {
        lru->n = 0; /* never matches: the slot is re-recorded next time */
        record(vk, lru->cmd, vk->log, vk->n_log);
        vk->stats.recordings++;
        return lru->cmd;
    }
    memcpy(copy, vk->log, (size_t)vk->n_log * sizeof *copy);
    lru->log = copy, lru->n = vk->n_log, lru->hash = h, lru->used = vk->tick;
    record(vk, lru->cmd, vk->log, vk->n_log);
    vk->stats.recordings++;
    return lru->cmd;
}

uint64_t gm_vk_arena(gm_vk *vk, size_t bytes, void **host) {
    bytes = (bytes + 15) & ~(size_t)15;
    if (vk->arena_used + bytes > vk->arena_size) {
        if (gm_vk_flush(vk)) return 0; /* resets the arena */
        if (bytes > vk->arena_size) {  /* a larger one, for good */
            size_t size = vk->arena_size;
            while (size < bytes) size *= 2;
            const uint64_t a = gm_vk_buffer(vk, size, true);
            if (!a) return 0;
            gm_vk_buffer_free(vk, vk->arena);
            vk->arena = a, vk->arena_size = size, vk->arena_map = gm_vk_map(vk, a);
        }
    }
    const uint64_t a = vk->arena + vk->arena_used;
    *host = vk->arena_map + vk->arena_used;
    vk->arena_used += bytes;
    return a;
}

void gm_vk_dispatch(gm_vk *vk, gm_vk_pipe p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                    uint32_t gz) {
    if (!gx || !gy || !gz) return;
    vk_op op;
    memset(&op, 0, sizeof op); /* padding too: logs are compared as bytes */
    op.kind = VK_OP_DISPATCH, op.pipe = (int)p, op.push_bytes = (uint32_t)push_bytes;
    memcpy(op.push, push, push_bytes);
    op.g[0] = gx, op.g[1] = gy, op.g[2] = gz;
    if (log_op(vk, &op)) vk->stats.dispatches++;
}

static void log_copy(gm_vk *vk, uint64_t dst, uint64_t src, size_t bytes, int kind) {
    vk_buf *d = find_buf(vk, dst), *s = find_buf(vk, src);
    if (!d || !s || !bytes) return;
    vk_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind, op.src = s->buf, op.dst = d->buf;
    op.src_off = src - s->addr, op.dst_off = dst - d->addr, op.bytes = bytes;
    log_op(vk, &op);
}

void gm_vk_copy(gm_vk *vk, uint64_t dst, uint64_t src, size_t bytes) { log_copy(vk, dst, src, bytes, VK_OP_COPY); }

gm_status gm_vk_read(gm_vk *vk, void *host, uint64_t src, size_t bytes) {
    const void *m = gm_vk_map(vk, src);
    gm_status st = GM_OK;
    if (m) { /* host-visible: after the pending ops */
        st = gm_vk_flush(vk);
        if (!st) memcpy(host, m, bytes);
        return st;
    }
    if (bytes > vk->staging_size) { /* a larger staging buffer, for good */
        size_t size = vk->staging_size;
        while (size < bytes) size *= 2;
        if ((st = gm_vk_flush(vk))) return st;
        const uint64_t a = gm_vk_buffer(vk, size, true);
        if (!a) return GM_ERR_NOMEM;
        gm_vk_buffer_free(vk, vk->staging);
        vk->staging = a, vk->staging_size = size;
    }
    log_copy(vk, vk->staging, src, bytes, VK_OP_COPY_TO_HOST);
    st = gm_vk_flush(vk);
    if (!st) memcpy(host, gm_vk_map(vk, vk->staging), bytes);
    return st;
}

gm_status gm_vk_flush(gm_vk *vk) {
    gm_status st = GM_OK;
    if (vk->n_log) {
        vk_fns *f = &vk->f;
        VkCommandBuffer cmd = command_buffer_for_log(vk);
        vk->n_log = 0;
        const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
        if (!cmd || f->vkQueueSubmit(vk->queue, 1, &si, vk->fence) != VK_SUCCESS ||
            f->vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS)
            st = GM_ERR_IO;
        f->vkResetFences(vk->dev, 1, &vk->fence);
        vk->stats.submits++;
    }
    vk->arena_used = 0;
    if (st && !vk->sticky) vk->sticky = st;
    if (vk->validation_errors > 0 && !vk->sticky) vk->sticky = GM_ERR_IO;
    return vk->sticky;
}

void gm_vk_fail(gm_vk *vk, gm_status st) {
    if (!vk->sticky) vk->sticky = st;
}

bool gm_vk_pending(const gm_vk *vk) { return vk->n_log > 0; }

gm_backend_stats gm_vk_stats(const gm_vk *vk) { return vk->stats; }
