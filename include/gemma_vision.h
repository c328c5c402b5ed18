/* gemma_vision.h — libgemma: images in (vision/): decoding under limits, preprocessing, the Gemma 3
 * and Gemma 4 vision encoders and the rows they give a sequence. */
#ifndef GEMMA_VISION_H
#define GEMMA_VISION_H

#include "gemma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ images (vision/) */

/* Images in: decoding (PNG, JPEG, WebP) to 8-bit RGB and the preprocessing the vision encoders'
 * references apply before their first layer. Images come from untrusted uploads, so every decoder
 * checks the header's dimensions against limits before it allocates pixel memory, turns truncated
 * or corrupt data into an error (never a crash, never a leak) and prints nothing. */

/* width * height pixels, row-major, 3 bytes each (R, G, B), no padding between rows. pixels is
 * malloc'd by the function that fills the image; gm_image_free releases it. */
typedef struct gm_image {
    int width, height;
    uint8_t *pixels;
} gm_image;

/* What a decoder accepts. A field <= 0 takes its default (GM_IMAGE_MAX_SIDE, GM_IMAGE_MAX_PIXELS);
 * a NULL gm_image_limits* takes all defaults. Dimensions are those of the file's header, before
 * EXIF orientation (which only swaps them). */
typedef struct gm_image_limits {
    int max_width;
    int max_height;
    int64_t max_pixels;
} gm_image_limits;
#define GM_IMAGE_MAX_SIDE 8192
#define GM_IMAGE_MAX_PIXELS ((int64_t)40 * 1000 * 1000)

/* Decodes bytes[0..len) into *out (zeroed first; freed again on failure). The format comes from
 * the magic bytes, not a name or MIME type: PNG (libpng), JPEG (libjpeg-turbo), WebP (libwebp; an
 * animated WebP is GM_ERR_UNSUPPORTED). Anything else is GM_ERR_FORMAT naming what it looks like
 * (GIF, BMP, TIFF, HEIF/AVIF, ..., or the first bytes). Conversions, as the references do:
 *  - alpha is dropped, not composited (Pillow's convert("RGB") and llama.cpp's stbi_load(..., 3)
 *    both keep the colour channels as stored): a transparent pixel keeps its stored colour;
 *  - grayscale is replicated to R = G = B; palettes are expanded (their transparency dropped);
 *  - 16-bit samples keep their high byte (stb_image, and Pillow for RGB; Pillow clips 16-bit gray);
 *  - JPEG: the EXIF orientation tag (APP1) is applied, as transformers' load_image does with
 *    ImageOps.exif_transpose (llama.cpp ignores it); CMYK / YCCK JPEGs are converted as Pillow
 *    does (Adobe inverted CMYK);
 *  - a JPEG that ends early is an error (Pillow's "image file is truncated"), not a grey bottom.
 * Over a limit: GM_ERR_UNSUPPORTED, from the header alone. */
GEMMA_API gm_status gm_image_decode(const void *bytes, size_t len, const gm_image_limits *lim, gm_image *out, gm_error *err);
/* Frees img->pixels and zeroes *img (NULL-safe). */
GEMMA_API void gm_image_free(gm_image *img);
/* A 128-bit identity of the decoded image (its size and pixels, not its file's bytes: the same picture
 * sent as PNG or WebP is the same image) under a 128-bit key: SipHash-2-4 twice, under key and under key
 * with its words swapped. With a secret random key (the server's) nobody can aim a collision; it names
 * the image in the prefix cache (gm_embed_span.key) and in an encoder cache. */
GEMMA_API void gm_image_digest(const gm_image *img, const uint64_t key[2], uint64_t out[2]);

/* src resized to width x height (each 1..65536) into *out (new pixels) with Pillow's BILINEAR:
 * separable, a triangle filter widened by the scale when downscaling (antialiasing), 22-bit
 * fixed-point weights, each pass rounded to 8 bits. Identical bytes to Pillow >= 13's
 * PIL.Image.resize((width, height), Image.BILINEAR) on an RGB image, which runs the vertical pass
 * first when the height shrinks by more than twice what the width does (older Pillow and
 * llama.cpp's resize_pillow always run the horizontal pass first: some bytes differ by one). */
GEMMA_API gm_status gm_image_resize_bilinear(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* The same with Pillow's BICUBIC (Keys' cubic with a = -0.5, support 2, widened by the scale when
 * downscaling; 8-bit clamping after each pass): identical bytes to Pillow >= 13's
 * PIL.Image.resize((width, height), Image.BICUBIC) on an RGB image, pass order as above. What Gemma 4's
 * llama.cpp preprocessing uses (transformers' Gemma4ImageProcessor uses torchvision's instead). */
GEMMA_API gm_status gm_image_resize_bicubic(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* llama.cpp's fixed-size preprocessing (img_tool::resize, PAD_CEIL): src scaled by
 * min(width / w, height / h) (float), each side ceil'd and capped, resized with
 * Pillow's bilinear filter with llama.cpp's pass order (horizontal first, always), centred (offsets
 * floored) on a black width x height canvas. An image already width x height is copied unchanged. */
GEMMA_API gm_status gm_image_letterbox(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* Planar CHW floats: out[c * h * w + y * w + x] = (pixel / 255.0f - mean[c]) / std[c], in float as
 * llama.cpp computes it. out holds 3 * width * height floats. std[c] == 0 is GM_ERR_ARG. */
GEMMA_API gm_status gm_image_to_chw(const gm_image *img, const float mean[3], const float std[3], float *out, gm_error *err);

/* ------------------------------------------------------------------ vision encoder (vision/) */

/* The image encoders of Gemma 3 and Gemma 4, read from llama.cpp mmproj GGUFs (general.architecture "clip"):
 *  - Gemma 3 (clip.projector_type "gemma3"): SigLIP ViT + the Gemma 3 projector. One fixed input size,
 *    gm_vision_image_size squared, 256 rows.
 *  - Gemma 4 (clip.vision.projector_type "gemma4v"): a ViT with 2D RoPE, 3 x 3 pooling and a projection. The
 *    input size is chosen per image (llama.cpp's rule: aspect kept, sides multiples of 48, between
 *    image_min_tokens and image_max_tokens rows of 48 x 48 pixels each), so gm_vision_image_size is 0 and
 *    gm_vision_n_tokens the most rows one image can give.
 * An encoder turns one image, resized and normalised ((u8 / 255 - mean) / std per channel, planar CHW), into
 * rows of gm_vision_embd_dim floats: the rows that take the place of the image's soft tokens in the text
 * model's input (not scaled by sqrt(width): the text model's embedding scale is for token lookups only).
 * Weights F32, F16, BF16 or Q8_0 (the matrices; vectors are read as floats). The encoder runs on a thread
 * pool (its own, or gm_vision_options.pool) and owns all its scratch, sized at open for the largest input:
 * encoding allocates nothing after the first call. One thread at a time per gm_vision. */
typedef struct gm_vision gm_vision;

typedef struct gm_vision_options {
    int n_threads; /* <= 0: physical cores */
    gm_isa isa;    /* the matmul kernels' level (GM_ISA_AUTO: the CPU's best) */
    /* Gemma 4: the size rule's bounds in rows per image (llama.cpp's --image-min-tokens / --image-max-tokens);
     * <= 0: 70 and 1120. The scratch is sized for image_max_tokens. Gemma 3 ignores them. */
    int image_min_tokens;
    int image_max_tokens;
    /* Gemma 4 files say nothing about the FFN's activation (no clip.use_gelu). false (default): GELU, tanh
     * form, what transformers trained the model with (gelu_pytorch_tanh); true: gelu_quick (x sigmoid(1.702 x)),
     * what llama.cpp runs on such files, for parity with it. A file with clip.use_gelu / use_silu gets that. */
    bool llama_cpp_act;
    /* NULL: the encoder starts its own pool of n_threads; else it runs on this one (n_threads unused), which
     * must outlive it: share the text engine's (gm_engine_options.pool) so one process runs one pool. */
    gm_threadpool *pool;
    /* What runs the layers: GM_BACKEND_CPU (0, default), or GM_BACKEND_REFERENCE (plain loops summing in double,
     * one thread: slow, for checking the CPU's numbers). */
    gm_backend_kind backend;
} gm_vision_options;

/* o may be NULL (defaults). path: an mmproj GGUF, or a Hugging Face folder of Gemma3ForConditionalGeneration /
 * Gemma4ForConditionalGeneration (config.json's vision_config, the towers' tensors in its safetensors, the
 * normalisation from preprocessor_config.json), read as the mmproj llama.cpp's converter makes of it (the same
 * embeddings; matrices stay mapped). A file that is not a Gemma 3 or Gemma 4 mmproj, a folder without a vision
 * tower, or one with a missing or misshapen key or tensor, is refused with GM_ERR_FORMAT / GM_ERR_UNSUPPORTED /
 * GM_ERR_NOT_FOUND naming it (a folder's errors name its config.json keys and HF tensor names). */
GEMMA_API gm_status gm_vision_open(const char *path, const gm_vision_options *o, gm_vision **out, gm_error *err);
GEMMA_API void gm_vision_free(gm_vision *v);
GEMMA_API int gm_vision_image_size(const gm_vision *v); /* pixels per side of the input (896 for Gemma 3); 0 for Gemma 4 */
GEMMA_API int gm_vision_n_tokens(const gm_vision *v);   /* rows per image (256 for Gemma 3); Gemma 4: the most (max tokens) */
GEMMA_API int gm_vision_embd_dim(const gm_vision *v);   /* floats per row: the text model's width */
/* The per-channel normalisation the encoder expects (clip.vision.image_mean / image_std), RGB. */
GEMMA_API void gm_vision_mean_std(const gm_vision *v, float mean[3], float std[3]);
/* chw: 3 x S x S floats (S = gm_vision_image_size), normalised; out: n_tokens x embd_dim floats. Gemma 3
 * only (Gemma 4 has no fixed size: GM_ERR_ARG; use gm_vision_encode_chw). */
GEMMA_API gm_status gm_vision_encode(gm_vision *v, const float *chw, float *out, gm_error *err);

/* Family-neutral calls (what the CLI and the server use). The encoder's family: 3 (Gemma 3: SigLIP at a fixed
 * size, 256 rows in <start_of_image> ... <end_of_image>), 4 (Gemma 4: sizes chosen per image). */
GEMMA_API int gm_vision_family(const gm_vision *v);
/* The input size the family's reference picks for a w x h image and the rows it makes: Gemma 3 image_size
 * squared; Gemma 4 llama.cpp's calc_size_preserved_ratio with sides multiples of a = 48 (patch 16 x pool 3):
 * each side rounded to a multiple of a (at least a); above image_max_tokens a^2 pixels both sides are scaled
 * by 1 / sqrt(w h / max) and floored to multiples of a (at least a), below image_min_tokens a^2 by
 * sqrt(min / (w h)) and ceiled; in float, as llama.cpp. Rows = W H / a^2. GM_ERR_ARG for w or h <= 0. */
GEMMA_API gm_status gm_vision_input_size(const gm_vision *v, int w, int h, int *out_w, int *out_h, int *n_tokens, gm_error *err);
/* img as the family's reference prepares it for the first layer (Gemma 3: letterboxed to image_size
 * squared as llama.cpp does, then normalised; Gemma 4: letterboxed to gm_vision_input_size's size with
 * Pillow's bicubic filter as llama.cpp does (horizontal pass first, centred, black bars), then normalised):
 * *chw (malloc'd, 3 x *h x *w planar floats), the size chosen, and *n_tokens, the rows gm_vision_encode_chw
 * makes of it. */
GEMMA_API gm_status gm_vision_preprocess(const gm_vision *v, const gm_image *img, float **chw, int *w, int *h, int *n_tokens,
                                         gm_error *err);
/* Encodes a w x h input from gm_vision_preprocess into out (n_tokens x embd_dim floats). A size the
 * family cannot take is GM_ERR_ARG (Gemma 3: not image_size squared; Gemma 4: a side not a multiple of 48,
 * more than image_max_tokens rows, or more patches per side than the position table has). Gemma 4 takes any
 * such size, whatever image_min_tokens says (that bound is the size rule's, not the encoder's). */
GEMMA_API gm_status gm_vision_encode_chw(gm_vision *v, const float *chw, int w, int h, float *out, gm_error *err);
/* gm_vision_preprocess then gm_vision_encode_chw: *out malloc'd (*n_tokens x embd_dim floats). */
GEMMA_API gm_status gm_vision_encode_image(gm_vision *v, const gm_image *img, float **out, int *n_tokens, gm_error *err);
/* What an encoder is (gemma inspect). */
typedef struct gm_vision_info {
    int family;              /* gm_vision_family */
    const char *projector;   /* the file's projector type: "gemma3", "gemma4v" */
    int image_size;          /* pixels per side (Gemma 3); 0 when chosen per image */
    int patch_size, n_layers, n_embd, n_ff, n_head;
    int n_tokens;            /* rows per image (Gemma 3), or the most per image */
    int embd_dim;            /* the text model's width */
    const char *activation;  /* "gelu-tanh", "gelu-quick", "silu" */
    float mean[3], std[3];
} gm_vision_info;
GEMMA_API void gm_vision_get_info(const gm_vision *v, gm_vision_info *out);

/* One image ready for a sequence (gm_embed_span): its rows, its identity and its decoded size. */
typedef struct gm_vision_rows {
    float *rows;      /* n_rows x embd_dim, malloc'd */
    int n_rows;
    uint64_t key[2];  /* gm_image_digest of the decoded pixels under the caller's secret */
    int width, height;
} gm_vision_rows;
/* An image file's bytes (PNG, JPEG, WebP; lim as gm_image_decode) decoded, named and encoded. */
GEMMA_API gm_status gm_vision_encode_bytes(gm_vision *v, const void *bytes, size_t len, const gm_image_limits *lim,
                                           const uint64_t secret[2], gm_vision_rows *out, gm_error *err);
GEMMA_API void gm_vision_rows_free(gm_vision_rows *r);
/* The token an image's rows carry in a history (gm_embed_span.placeholder): Gemma 4's <|image|>, Gemma 3's
 * <image_soft_token> when the vocabulary has it, else <pad> (0). */
GEMMA_API int32_t gm_tokenizer_image_placeholder(const gm_tokenizer *tok);

/* @end generator */


/* @end images */

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_VISION_H */
