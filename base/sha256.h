/* sha256.h: SHA-256 (FIPS 180-4), for cache keys and file checksums. */
#ifndef TG_SHA256_H
#define TG_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct tg_sha256 {
  uint32_t h[8];
  uint64_t nbytes;          /* message length so far */
  unsigned char block[64];  /* a partial block waiting for more input */
  size_t nblock;
} tg_sha256;

enum { TG_SHA256_HEX = 65 }; /* 64 hex digits and the terminating NUL */

void tg_sha256_init(tg_sha256 *s);
void tg_sha256_update(tg_sha256 *s, const void *data, size_t n);
/* Finishes the digest: 32 bytes into out (may be NULL) and, as lower-case
 * hex, into hex (may be NULL).  s must be initialised again to reuse it. */
void tg_sha256_final(tg_sha256 *s, unsigned char out[32], char hex[TG_SHA256_HEX]);
/* Hashes one field of a cache key: its length (8 bytes, little-endian),
 * then its bytes.  Keys built from fields this way cannot collide by
 * shifting bytes between neighbours ("ab","c" vs "a","bc").  NULL hashes
 * like "". */
void tg_sha256_field(tg_sha256 *s, const char *str);

#endif
