/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-bytes.h - GGUF files byte by byte, any of them malformed, for the tests of the GGUF reader; opening them, and what the reader must say. */
#ifndef DEVCACHE_TEST_GGUF_BYTES_H
#define DEVCACHE_TEST_GGUF_BYTES_H

#include <stddef.h>
#include <stdint.h>

#include <devcache.h>

#include "tap.h"

/* The value types, as the spec numbers them. */
enum {
	T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL,
	T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64
};

/* The folder of the group: a fresh /tmp/devcache-gguf-XXXXXX. */
TEST_TMPDIR_FIXTURE_EXTERN;

/* Run the group with TAP output, in its folder.  The messages are checked
 * in English. */
#define GGUF_RUN_TAP(tests)                                                                     \
	(setenv("LANGUAGE", "C", 1), setenv("LC_ALL", "C", 1),                                 \
	 cmocka_set_message_output(CM_OUTPUT_TAP),                                              \
	 cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown))

/* A file being written, in memory. */
struct buf {
	unsigned char *p;
	size_t len, cap;
};

/* Append n bytes of s. */
void put(struct buf *b, const void *s, size_t n);
/* Append a little-endian number, a float as its bits, or a string as its
 * u64 length then its bytes (strn_: n bytes of s, NULs and all). */
void u8_(struct buf *b, uint8_t v);
void u16_(struct buf *b, uint16_t v);
void u32_(struct buf *b, uint32_t v);
void u64_(struct buf *b, uint64_t v);
void f32_(struct buf *b, float f);
void f64_(struct buf *b, double d);
void strn_(struct buf *b, const char *s, size_t n);
void str_(struct buf *b, const char *s);
/* Append n zero bytes; as many as bring the length to a multiple of align. */
void zeros(struct buf *b, size_t n);
void pad(struct buf *b, size_t align);

/* A new file: the header of a GGUF of this version and these counts. */
struct buf gguf(uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A key and its value's type; the caller writes the value. */
void key(struct buf *b, const char *k, uint32_t type);
/* A key and its value. */
void kv_u32(struct buf *b, const char *k, uint32_t v);
void kv_str(struct buf *b, const char *k, const char *v);
/* A tensor info: its name, dimensions ne[0..n_dims), ggml type and offset
 * in the data section. */
void tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
	    uint32_t type, uint64_t offset);

#define NE(...) ((const uint64_t[]){__VA_ARGS__})

/* dir/name, in one of four buffers used in turn. */
const char *path_of(const char *name);
/* Write the buffer to dir/name (and free it); the path. */
const char *write_buf(const char *name, struct buf *b);
/* Write the buffer to dir/name and open it; a failed test if it cannot be. */
devcache_model_file_t *open_ok(struct buf *b, const char *name);
/* The file must be refused as malformed, the message naming it and fault. */
void expect_bad_path(const char *path, const char *fault);
/* The same for the buffer, written to dir/bad.gguf. */
void expect_bad(struct buf *b, const char *fault);
/* The key of metadata entry i is want_key; its value as JSON.  Not
 * inlined: gcc then takes the returned text for a pointer into k and v. */
__attribute__((noinline)) const char *meta(devcache_model_file_t *mf, size_t i,
					   const char *want_key);

#endif
