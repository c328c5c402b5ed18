/* vision/mmproj_hf.h — a Hugging Face folder of Gemma3ForConditionalGeneration or Gemma4ForConditionalGeneration
 * (config.json with vision_config, the towers' tensors in its safetensors) seen as the mmproj GGUF llama.cpp's
 * converter (conversion/gemma.py) would make of it: the same keys, names and layouts, with the converter's
 * transforms (Gemma 3's soft-embedding norm 1 + w, Gemma 4's patch embedding columns HWC -> CHW). The loaders
 * (mmproj.c, mmproj_gemma4.c) then read it as they read a file, so both sources go through one set of checks
 * and give the same embeddings. Matrices stay views into the mapped safetensors; only transformed tensors are
 * copied. Internal to vision/. */
#ifndef GM_VISION_MMPROJ_HF_H
#define GM_VISION_MMPROJ_HF_H

#include <stdbool.h>

#include "formats/gguf.h"

typedef struct mmp_hf mmp_hf; /* what an assembled file's tensors point into */

/* Whether path is a folder (then read as a Hugging Face model). */
bool mmp_is_folder(const char *path);
/* The vision family config.json describes: 3 (vision_config siglip_vision_model) or 4 (gemma4_vision). A folder
 * without config.json or vision_config, or with another vision tower, is an error naming what is missing. */
gm_status mmp_hf_family(const char *dir, int *family, gm_error *err);
/* dir as an mmproj: *f (gguf_assemble'd, named dir) and *hf, which must outlive *f (mmp_close frees both). */
gm_status mmp_hf_open(const char *dir, gguf_file **f, mmp_hf **hf, gm_error *err);

/* What the loaders call: a GGUF file (*hf NULL), or a folder through mmp_hf_open. */
gm_status mmp_open(const char *path, gguf_file **f, mmp_hf **hf, gm_error *err);
void mmp_close(gguf_file *f, mmp_hf *hf);

#endif
