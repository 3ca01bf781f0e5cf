/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz.h - what the fuzz targets share: the libFuzzer entry point, a private temp folder, writing inputs as files. */
#ifndef DEVCACHE_FUZZ_H
#define DEVCACHE_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/*
 * Each target is one LLVMFuzzerTestOneInput: built with -fsanitize=fuzzer
 * it is a libFuzzer program (./configure --enable-fuzzing, make fuzz);
 * built with fuzz/replay.c under any compiler it replays a corpus (make
 * check).  A target must be deterministic, free everything it allocates
 * and bound its work by the input's size: inputs above FUZZ_MAX_INPUT are
 * ignored.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (1u << 20)

/* This process's own folder, made on the first call under $TMPDIR (or
 * /dev/shm, or /tmp) as devcache-fuzz-XXXXXX and removed at exit; aborts when it cannot
 * be made (a fuzzer without its folder would report nonsense). */
const char *fuzz_tmpdir(void);

/* "TMPDIR/name", in a static buffer that the next call reuses. */
const char *fuzz_path(const char *name);

/* Write data to path (created or truncated).  -1 when the path cannot
 * be a file (a folder of that name, a file where a folder should be);
 * aborts on any other error, which is the machine's fault and not the
 * input's. */
int fuzz_write(const char *path, const void *data, size_t size);

/* Remove path and everything under it (no error if it is missing). */
void fuzz_remove_tree(const char *path);

/* A copy of the input with a terminating NUL (NULL: out of memory). */
char *fuzz_strndup(const uint8_t *data, size_t size);

#endif
