/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-model-load.c - fuzz target: one model file loaded onto the host device, mapped and read, and every tensor's bytes read. */
#include "config.h"

#include "fuzz.h"
#include "fuzz-model.h"

#include <devcache.h>

#include <stdio.h>
#include <stdlib.h>

/* No configuration file, no environment, the host backend alone: the
 * machine's setup never changes what an input does.  The second pass
 * reads the file into memory rather than mapping it. */
static const char *const passes[] = {
	"log_level:none,backends:host,backend_path:",
	"log_level:none,backends:host,backend_path:,mmap:false",
};

static void load(const char *path, const char *options)
{
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = options};
	devcache_ctx_t *ctx;
	devcache_device_t *host;
	devcache_model_t *m;

	if (devcache_open_ex(&ctx, &args) != 0 || devcache_device_get(ctx, "host", &host) != 0) {
		fprintf(stderr, "fuzz-model-load: cannot open the host device: %s\n",
			devcache_last_error());
		abort();
	}
	if (devcache_model_load(ctx, path, host, NULL, &m) == 0) {
		devcache_tensor_info_t t;
		unsigned char sum = 0;
		void *p;

		fuzz_check_model_file(devcache_model_file(m));
		/* Every byte the reader said is a tensor's must be readable. */
		for (size_t i = 0; devcache_model_tensor_at(m, i, &t, &p) == 0; i++)
			for (uint64_t j = 0; j < t.size; j++)
				sum ^= ((const volatile unsigned char *)p)[j];
		*(volatile unsigned char *)&sum = sum;
		devcache_model_release(m);
	}
	devcache_close(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	path = fuzz_path("model");
	fuzz_write(path, data, size);
	for (size_t i = 0; i < sizeof passes / sizeof *passes; i++)
		load(path, passes[i]);
	return 0;
}
