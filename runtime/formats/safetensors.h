/* safetensors.h: reading and writing the safetensors format.
 *
 * The format (huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of JSON mapping each tensor name to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
 * relative to the byte after the header) plus an optional "__metadata__"
 * object of string values, then the raw little-endian data.
 *
 * The reader trusts nothing: every length, offset, shape and name is
 * checked before use, and a bad file is reported through ctx as
 * "FILE: error: tensor 'NAME': ..." and then bails.  As the format
 * requires, the tensors must tile the data section exactly (no overlap, no
 * gap, no bytes left over).  A dim of 0 is allowed (nbytes is then 0); the
 * product of the non-zero dims is at most TG_MAX_ELEMS.
 *
 * The format does not align tensor data: `data` may have any alignment, so
 * copy the bytes with memcpy (or use tg_st_to_f64) rather than reading
 * through a float * or int32_t *. */
#ifndef TG_SAFETENSORS_H
#define TG_SAFETENSORS_H

#include "half.h" /* the conversions of its 16-bit dtypes */
#include "ir.h"

typedef struct tg_st_tensor {
  const char *name;
  tg_dtype dtype;       /* F32, BF16, F16, I32 or BOOL */
  int rank;
  int64_t shape[TG_MAX_RANK];
  const void *data;     /* little-endian, inside the file's buffer; unaligned */
  size_t nbytes;
} tg_st_tensor;

typedef struct tg_st_meta {
  const char *key, *value;
} tg_st_meta;

typedef struct tg_st_file {
  const char *path;
  tg_st_tensor *tensors; /* in the header's order */
  int n_tensors;
  tg_st_meta *meta;      /* the "__metadata__" entries */
  int n_meta;
  void *buf;             /* the whole file; freed by tg_st_free */
  size_t size;
} tg_st_file;

/* Reads and validates a whole file; bails through ctx on any problem. */
tg_st_file *tg_st_read(tg_ctx *ctx, const char *path);
/* The same for bytes in memory (tests, the fuzzer); the bytes are copied. */
tg_st_file *tg_st_parse(tg_ctx *ctx, const char *name, const void *bytes, size_t size);
void tg_st_free(tg_st_file *f);

/* By name, in O(log n); NULL when absent. */
const tg_st_tensor *tg_st_find(const tg_st_file *f, const char *name);
const char *tg_st_meta_get(const tg_st_file *f, const char *key);

/* Writes tensors (data in host order, which must be little-endian) and
 * metadata to path atomically: a temporary file beside it, fsync, rename.
 * Returns false with a message in why on failure (the old file is kept). */
bool tg_st_write(const char *path, const tg_st_tensor *tensors, int n, const tg_st_meta *meta,
                 int n_meta, char *why, size_t whylen);
/* The bytes tg_st_write would write, in one malloc'ed buffer (*out, *size)
 * for the caller to free (tests, the fuzzer's round trip). */
bool tg_st_encode(const tg_st_tensor *tensors, int n, const tg_st_meta *meta, int n_meta,
                  void **out, size_t *size, char *why, size_t whylen);

/* "[768, 2304]": a shape as messages show it; returns buf. */
const char *tg_st_shape_str(const int64_t *shape, int rank, char *buf, size_t n);

/* Copies a tensor's elements into out as doubles, converting from its
 * dtype (out has numel entries; BOOL gives 0 or 1). */
void tg_st_to_f64(const tg_st_tensor *t, double *out);

#endif
