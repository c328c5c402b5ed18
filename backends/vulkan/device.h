/* backends/vulkan/device.h — one Vulkan device as the backend uses it: the loader (dlopen'ed, so a binary without a
 * Vulkan driver still runs on the CPU), the instance and device with the features the shaders need, buffers named by
 * device addresses, the compute pipelines of the embedded shaders, and one command stream.
 *
 * The stream. Ops are logged, then recorded into a command buffer with a barrier after each (every op reads what the
 * one before wrote) and submitted only when the host must see a result (gm_vk_flush: a read, the logits) or before
 * it rewrites memory a logged op reads. A log equal to one recorded before (a decode step of the same shape: same
 * rows, same buffers, its per-step data in the arena at the same addresses) replays that command buffer instead of
 * recording a new one: the seed's decode graphs per bucket, with the bucket being the step's exact shape. Host data an op needs (row positions, block tables, a caller's
 * embedding) goes into the upload arena, a host-visible buffer written in order and reset after each flush.
 *
 * Buffers. Every buffer is created with a device address (VK_KHR_buffer_device_address, core in Vulkan 1.2): the
 * shaders take pointers in their push constants, no descriptor sets, and no tensor is bound by the 128 MiB
 * maxStorageBufferRange of lavapipe (a 262k-row embedding at Q8_0 is 178 MB). The backend hands those addresses to
 * the forward pass as its float pointers: never dereferenced on the host (gm_backend_ops.host_memory is false). */
#ifndef GM_BACKENDS_VULKAN_DEVICE_H
#define GM_BACKENDS_VULKAN_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

typedef struct gm_vk gm_vk;

/* the compute pipelines (one per shader of backends/vulkan/shaders/) */
typedef enum gm_vk_pipe {
    GM_VK_MATMUL,
    GM_VK_RMSNORM,
    GM_VK_ROPE,
    GM_VK_KV_STORE,
    GM_VK_EMBED,
    GM_VK_ELEMENTWISE,
    GM_VK_ATTENTION,
    GM_VK_PIPES
} gm_vk_pipe;

typedef struct gm_vk_options {
    int device;    /* index into gm_gpu_devices' list; < 0: the first GPU, else the first device */
    bool gpu_only; /* device < 0: the first GPU or GM_ERR_UNSUPPORTED */
    bool validate; /* the Khronos validation layer on; its errors fail the next flush */
} gm_vk_options;

gm_status gm_vk_open(const gm_vk_options *o, gm_vk **out, gm_error *err);
void gm_vk_close(gm_vk *vk);
/* "llvmpipe (LLVM 15.0.6, 256 bits)" */
const char *gm_vk_device_name(const gm_vk *vk);

/* A buffer of `bytes` with a device address; host_visible: mapped (gm_vk_map) and coherent. 0 when out of memory. */
uint64_t gm_vk_buffer(gm_vk *vk, size_t bytes, bool host_visible);
void gm_vk_buffer_free(gm_vk *vk, uint64_t addr);
/* the host mapping of a host-visible buffer's address (inside it), NULL otherwise */
void *gm_vk_map(gm_vk *vk, uint64_t addr);
/* bytes from host memory into a device buffer: direct where its memory is host-visible, else through staging */
gm_status gm_vk_upload(gm_vk *vk, uint64_t dst, const void *src, size_t bytes);

/* ---- the stream */
/* n bytes of host-written data for the ops recorded next (8-byte aligned; valid until the next flush): its
 * mapping in *host, its address returned; 0 when out of memory */
uint64_t gm_vk_arena(gm_vk *vk, size_t bytes, void **host);
void gm_vk_dispatch(gm_vk *vk, gm_vk_pipe p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                    uint32_t gz);
void gm_vk_copy(gm_vk *vk, uint64_t dst, uint64_t src, size_t bytes);
/* copies bytes at src (device) to host after every recorded op: flushes */
gm_status gm_vk_read(gm_vk *vk, void *host, uint64_t src, size_t bytes);
/* submits what is recorded and waits; GM_ERR_IO on a device or validation error, or the error of an op that could
 * not be recorded (gm_vk_fail): once one happened, every later flush returns it */
gm_status gm_vk_flush(gm_vk *vk);
/* an op could not be recorded (st): every later flush fails with it */
void gm_vk_fail(gm_vk *vk, gm_status st);
/* true when ops are recorded and not yet submitted */
bool gm_vk_pending(const gm_vk *vk);

/* submissions, recordings, replays, dispatches since the device was opened (gm_engine_backend_stats) */
gm_backend_stats gm_vk_stats(const gm_vk *vk);

#endif
