/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-model-file.c - fuzz target: one safetensors or GGUF file through devcache_model_file_open() and every accessor. */
#include "config.h"

#include "fuzz.h"
#include "fuzz-model.h"

#include <devcache.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	devcache_model_file_t *mf;
	const char *path;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	/* No name that claims a GGUF split: the reader would look for the
	 * other shards (fuzz-model-set does sets). */
	path = fuzz_path("model");
	fuzz_write(path, data, size);
	if (devcache_model_file_open(path, &mf) == 0) {
		fuzz_check_model_file(mf);
		devcache_model_file_close(mf);
	}
	return 0;
}
