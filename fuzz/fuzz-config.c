/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-config.c - fuzz target: a configuration file (devcache.conf(5)) through the configuration parser. */
#include "fuzz.h"
#include "fuzz-tunables.h"

#include <stdlib.h>

static void count(void *user, const char *message)
{
	(void)message;
	++*(unsigned long *)user;
}

/* Both ways the library reads a file: stopping at the first error (a
 * context's configuration), and reporting every one (devcache config
 * --check). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	path = fuzz_path("devcache.conf");
	fuzz_write(path, data, size);
	for (int all = 0; all < 2; all++) {
		struct tunable_set set;
		struct log_state log;
		unsigned long errors = 0;

		if (tunable_set_defaults(&set) != 0)
			abort();
		fuzz_log_init(&log);
		if (config_apply_file(&set, path, true, &log, all ? count : NULL, &errors) == 0)
			fuzz_check_tunables(&set);
		log_destroy(&log);
		tunable_set_free(&set);
	}
	return 0;
}
